// s3stream._core pipeline: shard indexes, epoch plans and the shard sample reader behind
// s3stream.ShardDataset. Waits release the GIL; samples reach Python as dicts of zero-copy Buffers.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "py_buffer.h"
#include "s3stream/epoch_plan.h"
#include "s3stream/mix_schedule.h"
#include "s3stream/rank_split.h"
#include "s3stream/shard_index.h"
#include "s3stream/shard_reader.h"
#include "s3stream/shard_set.h"
#include "status_error.h"

namespace nb = nanobind;

namespace s3stream::bindings {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

std::vector<PositionRange> RangesFrom(const Ranges& ranges) {
  std::vector<PositionRange> out;
  out.reserve(ranges.size());
  for (const auto& [begin, end] : ranges) out.push_back({begin, end});
  return out;
}

Ranges RangesTo(const std::vector<PositionRange>& ranges) {
  Ranges out;
  out.reserve(ranges.size());
  for (const PositionRange& r : ranges) out.emplace_back(r.begin, r.end);
  return out;
}

Buffer Uint64s(const std::vector<uint64_t>& values) {
  return Buffer::CopyOf(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()),
                                                 values.size() * sizeof(uint64_t)));
}

std::vector<uint64_t> Uint64sFrom(nb::handle values, const char* what) {
  PyBufferView view(values, /*writable=*/false);
  auto bytes = view.bytes();
  if (bytes.size() % sizeof(uint64_t)) {
    throw StatusError(InvalidArgument(std::string(what) + " must be a buffer of uint64"));
  }
  std::vector<uint64_t> out(bytes.size() / sizeof(uint64_t));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

nb::dict IndexToDict(const ShardIndex& index) {
  nb::dict d;
  d["size"] = index.object.size;
  d["etag"] = index.object.etag;
  d["gzip"] = index.gzip;
  d["offsets"] = index.offsets;
  d["keys"] = index.keys;
  return d;
}

nb::dict SampleToDict(PlannedSample&& s, const ShardSet& set) {
  nb::dict d;
  d["__key__"] = s.sample.key;
  d["__url__"] = set.location(s.shard).url;
  d["__index__"] = s.position;
  for (auto& [ext, data] : s.sample.fields) d[nb::str(ext.c_str(), ext.size())] = nb::cast(std::move(data));
  return d;
}

}  // namespace

void InitPipeline(nb::module_& m) {
  m.def(
      "build_shard_index",
      [](Client& client, const std::string& uri, std::optional<size_t> chunk_size) {
        Client::Location where = Unwrap(client.Locate(uri));
        ReaderOptions options;  // its defaults, unless the caller says otherwise
        if (chunk_size) options.chunk_size = *chunk_size;
        Result<ShardIndex> index = [&] {
          nb::gil_scoped_release release;
          return BuildShardIndex(where.store, where.key, options);
        }();
        return IndexToDict(Unwrap(std::move(index)));
      },
      nb::arg("client"), nb::arg("uri"), nb::arg("chunk_size") = nb::none(),
      "Reads a shard once and returns {size, etag, gzip, offsets, keys}.");

  nb::class_<ShardSet>(m, "ShardSet")
      .def_static(
          "make",
          [](Client& client, const std::vector<std::tuple<std::string, std::string, nb::handle, bool>>& shards) {
            std::vector<ShardEntry> entries;
            entries.reserve(shards.size());
            for (const auto& [uri, etag, offsets, gzip] : shards) {
              entries.push_back({uri, etag, Uint64sFrom(offsets, "offsets"), gzip});
            }
            return std::const_pointer_cast<ShardSet>(Unwrap(ShardSet::Make(client, std::move(entries))));
          },
          nb::arg("client"), nb::arg("shards"),
          "The dataset's shards from (uri, etag, offsets as uint64 buffer, gzip) tuples: located and checked once.")
      .def("__len__", &ShardSet::size);

  nb::enum_<Remainder>(m, "Remainder").value("drop", Remainder::kDrop).value("pad", Remainder::kPad);

  nb::class_<PlanOptions>(m, "PlanOptions")
      .def(nb::init<>())
      .def_rw("seed", &PlanOptions::seed)
      .def_rw("epoch", &PlanOptions::epoch)
      .def_rw("world_size", &PlanOptions::world_size)
      .def_rw("rank", &PlanOptions::rank)
      .def_rw("shuffle", &PlanOptions::shuffle)
      .def_rw("remainder", &PlanOptions::remainder)
      .def_rw("batch_size", &PlanOptions::batch_size)
      .def_rw("interleave", &PlanOptions::interleave)
      .def_rw("chunk_bytes", &PlanOptions::chunk_bytes)
      .def_rw("shuffle_chunks", &PlanOptions::shuffle_chunks)
      .def_rw("stripe", &PlanOptions::stripe);

  nb::class_<RankSplit>(m, "RankSplit")
      .def_static(
          "make",
          [](const Ranges& remaining, int world_size, uint64_t stripe, Remainder remainder) {
            return Unwrap(RankSplit::Make(RangesFrom(remaining), world_size, stripe, remainder));
          },
          nb::arg("remaining"), nb::arg("world_size"), nb::arg("stripe"), nb::arg("remainder"),
          "How a pass deals the positions `remaining` ([(begin, end), ...]) of an epoch's global sequence to ranks.")
      .def_prop_ro("per_rank", &RankSplit::per_rank)
      .def_prop_ro("world_size", &RankSplit::world_size)
      .def_prop_ro("stripe", &RankSplit::stripe)
      .def_prop_ro("remaining", [](const RankSplit& s) { return RangesTo(s.remaining()); })
      .def(
          "rank_positions",
          [](const RankSplit& s, int rank) {
            nb::gil_scoped_release release;
            return Uint64s(s.RankPositions(rank));
          },
          nb::arg("rank"), "The rank's share as native uint64 positions (memoryview(b).cast('Q')).")
      .def(
          "after", [](const RankSplit& s, uint64_t consumed) { return RangesTo(Unwrap(s.After(consumed))); },
          nb::arg("consumed"), "What remains once every rank consumed `consumed` of its share.");

  m.def("samples_per_rank", &SamplesPerRank, nb::arg("total"), nb::arg("world_size"), nb::arg("remainder"),
        "Samples each rank gets in an epoch (drop: total // world_size; pad: rounded up).");

  m.def(
      "epoch_permutation",
      [](uint64_t n, uint64_t seed, uint64_t epoch) {
        std::vector<uint64_t> order = [&] {
          nb::gil_scoped_release release;
          return EpochPermutation(n, seed, epoch);
        }();
        return Uint64s(order);
      },
      nb::arg("n"), nb::arg("seed"), nb::arg("epoch"),
      "The shuffled order of range(n) for (seed, epoch), as native uint64s (memoryview(b).cast('Q')).");

  nb::class_<EpochPlan>(m, "EpochPlan")
      .def_static(
          "make",
          [](const ShardSet& set, const PlanOptions& o, std::optional<Ranges> remaining) {
            nb::gil_scoped_release release;
            return Unwrap(remaining ? EpochPlan::Make(set.layouts(), o, RangesFrom(*remaining))
                                    : EpochPlan::Make(set.layouts(), o));
          },
          nb::arg("shards"), nb::arg("options"), nb::arg("remaining") = nb::none())
      .def_prop_ro("split", &EpochPlan::split)
      .def_static("default_stripe", [](const ShardSet& set, uint64_t chunk_bytes) {
        return DefaultStripe(set.layouts(), chunk_bytes);
      }, nb::arg("shards"), nb::arg("chunk_bytes"), "Positions per rank turn when PlanOptions.stripe is 0.")
      .def_prop_ro("total_samples", &EpochPlan::total_samples)
      .def_prop_ro("samples_per_rank", &EpochPlan::samples_per_rank)
      .def_prop_ro("batch_size", &EpochPlan::batch_size)
      .def("order", [](const EpochPlan& p) {
        std::vector<std::pair<uint32_t, uint32_t>> out;
        out.reserve(p.order().size());
        for (const auto& r : p.order()) out.emplace_back(r.shard, r.index);
        return out;
      }, "The rank's samples as (shard, index) pairs, in delivery order.")
      .def("worker_positions", &EpochPlan::WorkerPositions, nb::arg("worker"), nb::arg("num_workers"),
           nb::arg("start") = 0);

  nb::class_<MixSchedule>(m, "MixSchedule")
      .def_static(
          "make", [](std::vector<uint64_t> counts) { return Unwrap(MixSchedule::Make(std::move(counts))); },
          nb::arg("counts"), "The order of a mix epoch drawing counts[s] samples from source s.")
      .def_prop_ro("total", &MixSchedule::total)
      .def_prop_ro("counts", &MixSchedule::counts)
      .def(
          "locate",
          [](const MixSchedule& schedule, nb::handle positions) {
            std::vector<uint64_t> wanted = Uint64sFrom(positions, "positions");
            std::vector<uint64_t> sources(wanted.size()), draws(wanted.size());
            {
              nb::gil_scoped_release release;
              std::vector<MixDraw> found = Unwrap(schedule.Locate(wanted));
              for (size_t i = 0; i < found.size(); ++i) sources[i] = found[i].source, draws[i] = found[i].draw;
            }
            return std::make_pair(Uint64s(sources), Uint64s(draws));
          },
          nb::arg("positions"),
          "(sources, draws) of a uint64 buffer of positions, as native uint64 buffers (memoryview(b).cast('Q')).");

  nb::class_<ShardSampleReader>(m, "ShardReader")
      .def(
          "__init__",
          [](ShardSampleReader* self, std::shared_ptr<ShardSet> set, const EpochPlan& plan, int worker, int num_workers,
             uint64_t start, size_t max_bytes_ahead, size_t piece_size, uint64_t skip) {
            new (self) ShardSampleReader(std::move(set), plan, worker, num_workers, start, skip,
                                         ShardReaderOptions{max_bytes_ahead, piece_size});
          },
          nb::arg("shards"), nb::arg("plan"), nb::arg("worker"), nb::arg("num_workers"), nb::arg("start"),
          nb::arg("max_bytes_ahead"), nb::arg("piece_size"), nb::arg("skip") = 0)
      .def_prop_ro("size", &ShardSampleReader::size)
      .def_prop_ro("stats", [](const ShardSampleReader& r) {
        nb::dict d;
        d["window_bytes"] = r.stats().window_bytes;
        d["stalls"] = r.stats().stalls;
        d["bytes_fetched"] = r.stats().bytes_fetched;
        return d;
      }, "Read-ahead window, stalls (consumer waited on the network), bytes fetched.")
      .def(
          "next",
          [](ShardSampleReader& reader) -> nb::object {
            Result<std::optional<PlannedSample>> next = [&] {
              nb::gil_scoped_release release;
              return reader.Next();
            }();
            std::optional<PlannedSample> sample = Unwrap(std::move(next));
            if (!sample) return nb::none();
            return SampleToDict(std::move(*sample), reader.shards());
          },
          "The next sample as a dict, or None at the end.");
}

}  // namespace s3stream::bindings
