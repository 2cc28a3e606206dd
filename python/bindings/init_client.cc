// s3stream._core.Client and ClientConfig: the object-store operations, each releasing the GIL
// while it waits.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "py_buffer.h"
#include "s3stream/client.h"
#include "status_error.h"

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

// Parses `uri` and finds its store; `need_key` rejects bucket-only URIs for object operations.
// (A key ending in '/' is allowed: S3 "directory marker" objects are real objects.)
std::pair<std::shared_ptr<ObjectStore>, ObjectUri> Locate(Client& client, const std::string& uri, bool need_key) {
  ObjectUri parsed = Unwrap(ObjectUri::Parse(uri));
  if (need_key && parsed.key.empty()) {
    throw StatusError(InvalidArgument("'" + uri + "' names a bucket, not an object: add the object's key, "
                                      "e.g. s3://bucket/path/to/object"));
  }
  return {client.StoreFor(parsed), std::move(parsed)};
}

// A large object arrives as parallel ranged GETs of this size (one connection gives ~100 MB/s on
// S3; a single stream would cap one object there).
constexpr uint64_t kGetPartSize = 8 << 20;

Buffer Get(Client& client, const std::string& uri, std::optional<uint64_t> start, std::optional<uint64_t> end) {
  auto [store, parsed] = Locate(client, uri, true);
  GetOptions options;
  if (start || end) options.range = ByteRange{start.value_or(0), end};
  nb::gil_scoped_release release;
  return Unwrap(GetBufferInParts(store, parsed.key, options, kGetPartSize).Take());
}

// All GETs are issued before any is awaited, so they share the client's in-flight budget.
std::vector<Buffer> GetMany(Client& client, const std::vector<std::string>& uris) {
  std::vector<std::pair<std::shared_ptr<ObjectStore>, ObjectUri>> located;
  located.reserve(uris.size());
  for (const auto& uri : uris) located.push_back(Locate(client, uri, true));
  nb::gil_scoped_release release;
  std::vector<Future<Result<Buffer>>> pending;
  pending.reserve(located.size());
  for (auto& [store, parsed] : located) pending.push_back(GetBuffer(*store, parsed.key));
  std::vector<Buffer> out;
  out.reserve(pending.size());
  Status first_error;
  for (auto& f : pending) {
    Result<Buffer> r = f.Take();  // wait for all, even after a failure: no GET outlives the call
    if (r.ok()) out.push_back(std::move(r).value());
    else if (first_error.ok()) first_error = r.status();
  }
  ThrowIfError(first_error);
  return out;
}

ObjectInfo Head(Client& client, const std::string& uri) {
  auto [store, parsed] = Locate(client, uri, true);
  nb::gil_scoped_release release;
  return Unwrap(store->Head(parsed.key).Take());
}

std::tuple<std::vector<ObjectInfo>, std::vector<std::string>, std::string> ListPageOf(
    Client& client, const std::string& uri, const std::string& delimiter, const std::string& token, int max_keys) {
  auto [store, parsed] = Locate(client, uri, false);
  ListRequest request{parsed.key, delimiter, token, max_keys};
  nb::gil_scoped_release release;
  ListPage page = Unwrap(store->List(request).Take());
  return {std::move(page.objects), std::move(page.common_prefixes), std::move(page.next_continuation_token)};
}

std::string Put(Client& client, const std::string& uri, nb::handle data) {
  auto [store, parsed] = Locate(client, uri, true);
  Buffer body;
  {
    PyBufferView view(data, /*writable=*/false);
    body = Buffer::CopyOf(std::span<const uint8_t>(view.bytes()));
  }
  nb::gil_scoped_release release;
  return Unwrap(store->Put(parsed.key, std::move(body)).Take());
}

void Delete(Client& client, const std::string& uri) {
  auto [store, parsed] = Locate(client, uri, true);
  nb::gil_scoped_release release;
  ThrowIfError(store->Delete(parsed.key).Take());
}

}  // namespace

std::shared_ptr<ObjectStore> StoreForUri(Client& client, const std::string& uri, std::string* key) {
  auto [store, parsed] = Locate(client, uri, true);
  *key = parsed.key;
  return store;
}

void InitClient(nb::module_& m) {
  nb::enum_<AddressingStyle>(m, "AddressingStyle")
      .value("auto", AddressingStyle::kAuto)
      .value("path", AddressingStyle::kPath)
      .value("virtual", AddressingStyle::kVirtual);

  nb::class_<ClientConfig>(m, "ClientConfig")
      .def(nb::init<>())
      .def_rw("endpoint_url", &ClientConfig::endpoint_url)
      .def_rw("region", &ClientConfig::region)
      .def_rw("access_key_id", &ClientConfig::access_key_id)
      .def_rw("secret_access_key", &ClientConfig::secret_access_key)
      .def_rw("session_token", &ClientConfig::session_token)
      .def_rw("profile", &ClientConfig::profile)
      .def_rw("anonymous", &ClientConfig::anonymous)
      .def_rw("addressing_style", &ClientConfig::addressing_style)
      .def_rw("max_attempts", &ClientConfig::max_attempts)
      .def_rw("max_inflight", &ClientConfig::max_inflight)
      .def_rw("connect_timeout_s", &ClientConfig::connect_timeout_s)
      .def_rw("low_speed_limit", &ClientConfig::low_speed_limit)
      .def_rw("low_speed_time_s", &ClientConfig::low_speed_time_s)
      .def_rw("retry_base_delay_s", &ClientConfig::retry_base_delay_s)
      .def_rw("retry_max_delay_s", &ClientConfig::retry_max_delay_s)
      .def_rw("verify_tls", &ClientConfig::verify_tls)
      .def_rw("ca_bundle", &ClientConfig::ca_bundle);

  nb::class_<ObjectInfo>(m, "ObjectInfo")
      .def_ro("key", &ObjectInfo::key)
      .def_ro("size", &ObjectInfo::size)
      .def_ro("etag", &ObjectInfo::etag)
      .def_prop_ro("last_modified", [](const ObjectInfo& i) -> nb::object {
            // A timezone-aware UTC datetime (None when the store did not say).
            if (i.last_modified.empty()) return nb::none();
            std::string iso = i.last_modified;
            if (iso.back() == 'Z') iso = iso.substr(0, iso.size() - 1) + "+00:00";
            return nb::module_::import_("datetime").attr("datetime").attr("fromisoformat")(iso);
          })
      .def_static("prefix", [](std::string key) { return ObjectInfo{std::move(key), 0, "", ""}; },
                  "A common prefix in a delimited listing: key ends with the delimiter, size 0.")
      .def("__repr__", [](const ObjectInfo& i) {
        return "ObjectInfo(key=" + nb::cast<std::string>(nb::repr(nb::str(i.key.c_str()))) +
               ", size=" + std::to_string(i.size) + ", etag='" + i.etag + "')";
      });

  nb::class_<Client>(m, "Client")
      .def_static("create", [](const ClientConfig& config) { return Unwrap(Client::Create(config)); })
      .def_prop_ro("endpoint", [](const Client& c) { return c.config().endpoint; })
      .def_prop_ro("region", [](const Client& c) { return c.config().region; })
      .def_prop_ro("credentials_source", [](const Client& c) { return c.config().credentials_source; })
      .def_prop_ro("path_style", [](const Client& c) { return c.config().path_style; })
      .def("get", &Get, nb::arg("uri"), nb::arg("start") = nb::none(), nb::arg("end") = nb::none())
      .def("get_many", &GetMany, nb::arg("uris"))
      .def("head", &Head, nb::arg("uri"))
      .def("list_page", &ListPageOf, nb::arg("uri"), nb::arg("delimiter"), nb::arg("token"), nb::arg("max_keys"))
      .def("put", &Put, nb::arg("uri"), nb::arg("data"))
      .def("delete", &Delete, nb::arg("uri"));
}

}  // namespace s3stream::bindings
