// s3stream._core.Client and ClientConfig: the C++ Client's URI-level operations, each releasing
// the GIL while it waits.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "bindings.h"
#include "py_buffer.h"
#include "py_credentials.h"
#include "s3stream/client.h"
#include "status_error.h"

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

// Every wait below releases the GIL and ends early on Ctrl-C (status_error.h: KeyboardInterrupt).
Buffer Get(Client& client, const std::string& uri, std::optional<uint64_t> start, std::optional<uint64_t> end) {
  std::optional<ByteRange> range;
  if (start || end) range = ByteRange{start.value_or(0), end};
  Result<Buffer> got = [&]() -> Result<Buffer> {
    nb::gil_scoped_release release;
    auto cancel = std::make_shared<std::atomic<bool>>(false);
    Future<Result<Buffer>> future = client.Get(uri, range, kDefaultPieceSize, cancel);
    if (future.WaitInterruptibly()) return future.Take();
    cancel->store(true);  // its GETs stop within about a second; nobody waits for them
    return Interrupted("get of " + uri);
  }();
  return Unwrap(std::move(got));
}

std::vector<Buffer> GetMany(Client& client, const std::vector<std::string>& uris) {
  Result<std::vector<Buffer>> got = [&] {
    nb::gil_scoped_release release;
    return client.GetMany(uris);
  }();
  return Unwrap(std::move(got));
}

ObjectInfo Head(Client& client, const std::string& uri) {
  Result<ObjectInfo> info = [&] {
    nb::gil_scoped_release release;
    return Await(client.Head(uri), "HEAD " + uri);
  }();
  return Unwrap(std::move(info));
}

// The next page as (objects, common prefixes), or None after the last one.
nb::object NextPage(ListPager& pager) {
  Result<std::optional<ListPage>> next = [&] {
    nb::gil_scoped_release release;
    return pager.Next();
  }();
  std::optional<ListPage> page = Unwrap(std::move(next));
  if (!page) return nb::none();
  return nb::make_tuple(std::move(page->objects), std::move(page->common_prefixes));
}

// The next objects of a parallel listing in key order (a list, empty when none came within
// `timeout_s`), or None after the last.
nb::object NextObjects(ParallelLister& lister, double timeout_s) {
  Result<std::optional<std::vector<ObjectInfo>>> next = [&] {
    nb::gil_scoped_release release;
    return lister.Next(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }();
  std::optional<std::vector<ObjectInfo>> objects = Unwrap(std::move(next));
  if (!objects) return nb::none();
  return nb::cast(std::move(*objects));
}

std::string Put(Client& client, const std::string& uri, nb::handle data) {
  Buffer body;
  {
    PyBufferView view(data, /*writable=*/false);
    body = Buffer::CopyOf(std::span<const uint8_t>(view.bytes()));
  }
  Result<std::string> etag = [&] {
    nb::gil_scoped_release release;
    return Await(client.Put(uri, std::move(body)), "PUT " + uri);
  }();
  return Unwrap(std::move(etag));
}

void Delete(Client& client, const std::string& uri) {
  Status deleted = [&] {
    nb::gil_scoped_release release;
    return Await(client.Delete(uri), "DELETE " + uri);
  }();
  ThrowIfError(deleted);
}

// (uri, key, upload id, initiated) of every incomplete multipart upload under `uri`; the uri is the
// object's, as abort_upload takes it.
std::vector<std::tuple<std::string, std::string, std::string, std::string>> ListUploads(Client& client,
                                                                                       const std::string& uri,
                                                                                       int page_size) {
  ObjectUri base = Unwrap(ObjectUri::Parse(uri));
  Result<std::vector<UploadInfo>> uploads = [&] {
    nb::gil_scoped_release release;
    return client.ListUploads(uri, page_size);
  }();
  std::vector<std::tuple<std::string, std::string, std::string, std::string>> out;
  for (UploadInfo& u : Unwrap(std::move(uploads))) {
    out.emplace_back(base.WithKey(u.key).ToString(), std::move(u.key), std::move(u.upload_id), std::move(u.initiated));
  }
  return out;
}

void AbortUpload(Client& client, const std::string& uri, const std::string& upload_id) {
  Status aborted = [&] {
    nb::gil_scoped_release release;
    return Await(client.AbortUpload(uri, upload_id), "aborting upload " + upload_id + " of " + uri);
  }();
  ThrowIfError(aborted);
}

}  // namespace

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
      .def_rw("stall_timeout_s", &ClientConfig::stall_timeout_s)
      .def_rw("retry_base_delay_s", &ClientConfig::retry_base_delay_s)
      .def_rw("retry_max_delay_s", &ClientConfig::retry_max_delay_s)
      .def_rw("verify_tls", &ClientConfig::verify_tls)
      .def_rw("ca_bundle", &ClientConfig::ca_bundle)
      .def_rw("max_get_bytes", &ClientConfig::max_get_bytes)
      .def_rw("request_timeout_s", &ClientConfig::request_timeout_s)
      .def(
          "set_credentials_function",
          [](ClientConfig& c, nb::object function, std::string description) {
            c.credentials_provider = PythonCredentials(std::move(function), std::move(description));
          },
          nb::arg("function"), nb::arg("description"),
          "A callable returning (key, secret, token, expiration epoch seconds or None), or None: the "
          "credentials source instead of the default chain.");

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

  nb::class_<ListPager>(m, "ListPager").def("next", &NextPage, "The next page (objects, prefixes), or None.");

  nb::class_<ParallelLister>(m, "ParallelLister")
      .def("next", &NextObjects, nb::arg("timeout_s"),
           "The next objects in key order (empty if none came within timeout_s), or None after the last.")
      .def("progress", [](const ParallelLister& l) {
             ListProgress p = l.Progress();
             return nb::make_tuple(p.objects, p.requests, p.in_flight, p.done);
           }, "(objects listed, requests sent, requests in flight, done)")
      .def("cancel", &ParallelLister::Cancel);

  nb::class_<Client>(m, "Client")
      .def_static("create", [](const ClientConfig& config) { return Unwrap(Client::Create(config)); })
      .def_prop_ro("endpoint", [](const Client& c) { return c.config().endpoint; })
      .def_prop_ro("region", [](const Client& c) { return c.config().region; })
      .def_prop_ro("credentials_source", [](const Client& c) { return c.config().credentials_source; })
      .def_prop_ro("path_style", [](const Client& c) { return c.config().path_style; })
      .def_prop_ro("max_get_bytes", [](const Client& c) { return c.config().options.max_get_bytes; })
      .def("get", &Get, nb::arg("uri"), nb::arg("start") = nb::none(), nb::arg("end") = nb::none())
      .def("get_many", &GetMany, nb::arg("uris"))
      .def("head", &Head, nb::arg("uri"))
      .def("list", [](Client& c, const std::string& uri, const std::string& delimiter, int max_keys) {
             return Unwrap(c.List(uri, delimiter, max_keys));
           }, nb::arg("uri"), nb::arg("delimiter"), nb::arg("max_keys"))
      .def("list_parallel", [](Client& c, const std::string& uri, int max_requests, int max_keys) {
             return Unwrap(c.ListParallel(uri, ParallelListOptions{max_requests, max_keys}));
           }, nb::arg("uri"), nb::arg("max_requests"), nb::arg("max_keys"))
      .def("put", &Put, nb::arg("uri"), nb::arg("data"))
      .def("delete", &Delete, nb::arg("uri"))
      .def("list_uploads", &ListUploads, nb::arg("uri"), nb::arg("page_size"))
      .def("abort_upload", &AbortUpload, nb::arg("uri"), nb::arg("upload_id"));
}

}  // namespace s3stream::bindings
