#include "train/tasks/h5_write.hpp"

#include "core/h5_check.hpp"

namespace hpct::train::h5 {

void write_dataset(hid_t loc, const std::string& name, const std::vector<int64_t>& shape, hid_t type,
                   const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t lcpl = H5_CHECK(H5Pcreate(H5P_LINK_CREATE));
  H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
  hid_t space = H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  hid_t ds = H5_CHECK(H5Dcreate2(loc, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  H5_CHECK(H5Dclose(ds));
  H5_CHECK(H5Sclose(space));
  H5_CHECK(H5Pclose(lcpl));
}

namespace {
void write_attr(hid_t loc, const char* name, hid_t type, const void* value) {
  hid_t space = H5_CHECK(H5Screate(H5S_SCALAR));
  hid_t a = H5_CHECK(H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
  H5_CHECK(H5Awrite(a, type, value));
  H5_CHECK(H5Aclose(a));
  H5_CHECK(H5Sclose(space));
}
}  // namespace

void attr_i64(hid_t loc, const char* name, int64_t v) { write_attr(loc, name, H5T_NATIVE_INT64, &v); }
void attr_f64(hid_t loc, const char* name, double v) { write_attr(loc, name, H5T_NATIVE_DOUBLE, &v); }
void attr_str(hid_t loc, const char* name, const std::string& v) {
  hid_t t = H5_CHECK(H5Tcopy(H5T_C_S1));
  H5_CHECK(H5Tset_size(t, v.size() + 1));
  H5_CHECK(H5Tset_strpad(t, H5T_STR_NULLTERM));
  write_attr(loc, name, t, v.c_str());
  H5_CHECK(H5Tclose(t));
}

}  // namespace hpct::train::h5
