#pragma once
// Shared shard files (checkpoint.files = per_node | single): several ranks write their pieces into ONE HDF5 file, so that
// a checkpoint of N ranks creates N / ranks-per-node files (or one) instead of N. At scale the metadata server, not the
// bandwidth, limits a save that creates a file per rank.
//
// The file holds, for every rank r of the communicator, its pieces as the datasets /rank_%05d/<D>/piece_<k> (the
// caller's world rank: unique in the file), contiguous, with the same attributes as write_shard's (global_shape,
// offset, count, split_axis, replica, crc32c). The manifest that comes back is the one write_shard would return with
// file = the shared file's name and every file_dataset prefixed with rank_%05d/, so the protocol of checkpoint.hpp is
// unchanged: gather every rank's manifest to rank 0, write_index (several manifests naming one file map into it like
// any shard), commit. Reader and verify see no difference.
//
// Protocol inside (collective over comm). HDF5 runs on comm's rank 0 alone, with the ordinary POSIX driver; the data
// moves with pwrite(2), each rank its own bytes (ckpt/data_writer.hpp). No MPI-IO: HDF5's MPI-IO driver duplicates
// communicators inside every file creation, which Open MPI 4.1 did not survive beside a busy step loop, and the
// file's metadata is small enough for one process to write.
//   every rank: checks its pieces (nothing moves);
//   allgather of every rank's piece metadata (also how ranks learn that one failed its checks);
//   comm's rank 0: creates the file with every rank's datasets, allocated (4 KiB-aligned) and with their attributes
//   but the checksums, none of their data written (detail::ShardLayout); the datasets' offsets are broadcast;
//   every rank: writes its pieces' bytes at their offsets (O_DIRECT where the file system allows it), computing their
//   CRC32C as it copies them (ckpt/data_writer.hpp);
//   the checksums are gathered to rank 0, which writes them as the datasets' crc32c attributes and closes the file;
//   every rank fsyncs the file (on a parallel file system a client flushes only the pages it wrote); rank 0 fsyncs the
//   directory; a last agreement, so that on return every rank's bytes are durable.
// Between stages the ranks agree (an allreduce) whether every rank succeeded: a rank that failed rethrows its own error,
// the others throw one naming the file and the failed rank, so that no rank waits in a collective call that another
// rank will never make.
//
// Threads. comm may be used from any one thread (the MPI library provides MPI_THREAD_MULTIPLE: the background writer
// calls this beside the step loop), but nothing else may use comm during the call (pass a communicator reserved for
// checkpoints), and HDF5 (Debian's build is not thread-safe) must not be called by another thread meanwhile.
// MPI_COMM_WORLD is never used.
//
// Waits are not bounded by comm.timeout_s: a rank that never arrives (killed) blocks the others in MPI, as any
// collective of the save does; the job's launcher (mpirun, srun) ends the others when a rank dies.
#include <mpi.h>

#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace hpct::ckpt {

// Name of the shared file of node `node` (checkpoint.files = per_node): "node_00001.h5".
std::string node_file_name(int node);
// The ranks of `world` that share a node's file (checkpoint.files = per_node): MPI_Comm_split_type(SHARED), or, with the
// test seam HPCT_CKPT_RANKS_PER_NODE=K, ranks grouped by rank / K (one machine standing for several nodes). index: the
// node's rank among the nodes' first ranks (in world order), count: the number of nodes. Collective over world; the
// caller frees comm.
struct NodeGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  int index = 0, count = 1;
};
NodeGroup node_group(MPI_Comm world);
// Name of the one file of checkpoint.files = single.
inline constexpr const char* kSingleFileName = "shards.h5";

// Collective over comm: every rank of comm writes its pieces into the one file dir/file_name (dir created if needed,
// the file created or truncated), fsynced by every rank, the directory fsynced by comm's rank 0. Returns this rank's
// manifest: file = file_name, every piece's file_dataset prefixed "rank_%05d/" with `rank` (the caller's world rank:
// the ranks of comm must pass distinct values), crc as write_shard computes it. Same piece rules (pieces of 0 elements
// are not written; at least one axis, a consistent box, non-null data), attributes and error style as write_shard;
// every rank of comm must pass the same dir and file_name. phases (optional) filled as write_shard does: crc_s (this
// rank's CRC32C, part of write_s), metadata_s (the agreement on the pieces, rank 0's HDF5 file, the broadcast of the
// offsets, the gather of the checksums and rank 0's close), write_s (this rank's data), fsync_s (its fsync, the
// directory's and the agreement).
ShardManifest write_shared_shard(MPI_Comm comm, const std::string& dir, const std::string& file_name, int rank,
                                 const std::vector<Piece>& pieces, SavePhases* phases = nullptr);

}  // namespace hpct::ckpt
