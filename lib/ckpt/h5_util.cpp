#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/ckpt_internal.hpp"

namespace hpct::ckpt::detail {

// Checksums are of the pieces' little-endian bytes, read and written without conversion.
static_assert(std::endian::native == std::endian::little, "checkpoint pieces are stored as raw little-endian bytes");

void H5Id::close_checked() {
  if (id_ < 0) return;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  H5_CHECK(closer_(id));
}

QuietH5Errors::QuietH5Errors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  if (!h5::debug_printing()) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietH5Errors::~QuietH5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

// Checkpoints hold the fp32 masters and fp32 optimizer state whatever train.precision is (docs/invariants.md, "How the
// scale features compose"), so a bf16 or fp16 tensor reaching the writer or the reader is a bug in the caller, not a
// format.
constexpr const char* kNo16BitMessage =
    "a 16-bit (bf16 or f16) tensor was handed to the checkpoint code, but checkpoints hold only fp32 masters and fp32 "
    "optimizer state (never the 16-bit compute copy or activations); pass the fp32 master tensor instead";

hid_t h5_file_type(DType t) {
  switch (t) {
    case DType::F32: return H5T_IEEE_F32LE;
    case DType::F64: return H5T_IEEE_F64LE;
    case DType::I32: return H5T_STD_I32LE;
    case DType::I64: return H5T_STD_I64LE;
    case DType::U8: return H5T_STD_U8LE;
    case DType::BF16:
    case DType::F16: HPCT_FAIL("{}", kNo16BitMessage);
  }
  HPCT_FAIL("unhandled dtype");
}

hid_t h5_mem_type(DType t) {
  switch (t) {
    case DType::F32: return H5T_NATIVE_FLOAT;
    case DType::F64: return H5T_NATIVE_DOUBLE;
    case DType::I32: return H5T_NATIVE_INT32;
    case DType::I64: return H5T_NATIVE_INT64;
    case DType::U8: return H5T_NATIVE_UINT8;
    case DType::BF16:
    case DType::F16: HPCT_FAIL("{}", kNo16BitMessage);
  }
  HPCT_FAIL("unhandled dtype");
}

DType dtype_of_h5(hid_t type, const std::string& what) {
  const H5T_class_t cls = H5_CHECK(H5Tget_class(type));
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT && size == 4) return DType::F32;
  if (cls == H5T_FLOAT && size == 8) return DType::F64;
  if (cls == H5T_INTEGER) {
    const H5T_sign_t sign = H5Tget_sign(type);
    if (sign == H5T_SGN_2 && size == 4) return DType::I32;
    if (sign == H5T_SGN_2 && size == 8) return DType::I64;
    if (sign == H5T_SGN_NONE && size == 1) return DType::U8;
  }
  HPCT_FAIL("{} has an HDF5 type (class {}, {} bytes) that checkpoints do not use (f32, f64, i32, i64, u8)", what,
            static_cast<int>(cls), size);
}

H5Id make_fapl(bool dense_attributes) {
  H5Id fapl = plist_id(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  H5_CHECK(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG));
  if (dense_attributes) H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  return fapl;
}

H5Id make_lcpl() {
  H5Id lcpl = plist_id(H5_CHECK(H5Pcreate(H5P_LINK_CREATE)));
  H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  H5_CHECK(H5Pset_char_encoding(lcpl, H5T_CSET_UTF8));
  return lcpl;
}

void write_attr_scalar(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* value) {
  H5Id space = space_id(H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Id a = attr_id(H5_CHECK(H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT)));
  H5_CHECK(H5Awrite(a, mem_type, value));
}

void write_attr_i64_array(hid_t loc, const char* name, const std::vector<int64_t>& v) {
  const hsize_t n = v.size();
  H5Id space = space_id(n == 0 ? H5_CHECK(H5Screate(H5S_NULL)) : H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  H5Id a = attr_id(H5_CHECK(H5Acreate2(loc, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)));
  if (n > 0) H5_CHECK(H5Awrite(a, H5T_NATIVE_INT64, v.data()));
}

void write_attr_string(hid_t loc, const char* name, const std::string& value) {
  H5Id t = type_id(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
  const char* p = value.c_str();
  write_attr_scalar(loc, name, t, t, &p);
}

bool attr_exists(hid_t loc, const char* name) { return H5_CHECK(H5Aexists(loc, name)) > 0; }

int64_t read_attr_i64(hid_t loc, const char* name) {
  H5Id a = attr_id(H5_CHECK(H5Aopen(loc, name, H5P_DEFAULT)));
  int64_t v = 0;
  H5_CHECK(H5Aread(a, H5T_NATIVE_INT64, &v));
  return v;
}

std::string read_attr_string(hid_t attr) {
  H5Id ftype = type_id(H5_CHECK(H5Aget_type(attr)));
  if (H5_CHECK(H5Tis_variable_str(ftype)) > 0) {
    H5Id mtype = type_id(H5_CHECK(H5Tcopy(H5T_C_S1)));
    H5_CHECK(H5Tset_size(mtype, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(mtype, H5Tget_cset(ftype)));
    char* p = nullptr;
    H5_CHECK(H5Aread(attr, mtype, &p));
    std::string s = p != nullptr ? p : "";
    H5Id space = space_id(H5_CHECK(H5Aget_space(attr)));
    H5_CHECK(H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, &p));
    return s;
  }
  const size_t n = H5Tget_size(ftype);
  std::string s(n, '\0');
  H5_CHECK(H5Aread(attr, ftype, s.data()));
  const size_t nul = s.find('\0');
  if (nul != std::string::npos) s.resize(nul);
  return s;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC));
  if (fd < 0) HPCT_FAIL("cannot open {} to fsync it: {}", path, std::strerror(errno));
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    HPCT_FAIL("fsync of {} failed: {}; the checkpoint is not durable (check the file system)", path,
              std::strerror(err));
  }
  ::close(fd);
}

std::string file_problem(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return "missing";
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return fmt::format("unreadable ({})", ec.message());
  if (size == 0) return "empty (0 bytes)";
  std::ifstream f(path, std::ios::binary);
  if (!f) return fmt::format("unreadable ({})", std::strerror(errno));
  auto read_at = [&](uint64_t at, unsigned char* buf, size_t n) {
    f.clear();
    f.seekg(static_cast<std::streamoff>(at));
    f.read(reinterpret_cast<char*>(buf), static_cast<std::streamsize>(n));
    return static_cast<size_t>(f.gcount());
  };
  auto le = [](const unsigned char* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  };
  // The superblock sits at byte 0, 512, 1024, 2048, ... (a user block may precede it) and starts with this signature.
  static constexpr unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  for (uint64_t at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2) {
    unsigned char sb[64] = {0};
    const size_t got = read_at(at, sb, sizeof sb);
    if (got < 8 || std::memcmp(sb, kSignature, 8) != 0) continue;
    // End-of-file address (relative to the base address): superblock versions 0 and 1 after 24 or 28 bytes of
    // fixed fields, the base address and the free-space address; versions 2 and 3 after 12 bytes, the base address and
    // the superblock-extension address. Offsets are `size of offsets` (2, 4 or 8) bytes.
    const int version = sb[8];
    const int offsets = version <= 1 ? sb[13] : sb[9];
    const size_t base_at = version == 0 ? 24 : version == 1 ? 28 : 12;
    if (version > 3 || (offsets != 2 && offsets != 4 && offsets != 8) || base_at + 3 * offsets > got)
      return "";  // a superblock this parser does not know: leave the diagnosis to HDF5
    uint64_t base = le(sb + base_at, offsets);
    const uint64_t eof = le(sb + base_at + 2 * offsets, offsets);
    if (base == (offsets == 8 ? ~0ULL : (1ULL << (8 * offsets)) - 1)) base = at;  // undefined address
    if (base + eof > size) return fmt::format("truncated: {} of the {} bytes its superblock records", size, base + eof);
    return "";
  }
  return "not an HDF5 file (no HDF5 signature)";
}

std::string damage_of(const std::string& path, const std::string& hdf5_cause) {
  const std::string problem = file_problem(path);
  if (!problem.empty()) return problem;
  return "its HDF5 metadata is corrupt" + (hdf5_cause.empty() ? std::string() : " (HDF5: " + hdf5_cause + ")");
}

void pause_if_requested(const char* phase) {
  const char* want = std::getenv("HPCT_CKPT_PAUSE_AT");
  if (want == nullptr || std::strcmp(want, phase) != 0) return;
  std::fprintf(stderr, "hpctrain: HPCT_CKPT_PAUSE_AT=%s: pausing (test hook)\n", phase);
  std::fflush(stderr);
  ::sleep(3600);
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

}  // namespace hpct::ckpt::detail
