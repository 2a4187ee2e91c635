#pragma once
// Small serial-HDF5 writers for the reference dumps (train_gpt --dump, train_resnet --dump): a whole dataset at a
// path (intermediate groups created), and scalar attributes. Errors go through H5_CHECK.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpct::train::h5 {

void write_dataset(hid_t loc, const std::string& name, const std::vector<int64_t>& shape, hid_t type, const void* data);
void attr_i64(hid_t loc, const char* name, int64_t v);
void attr_f64(hid_t loc, const char* name, double v);
void attr_str(hid_t loc, const char* name, const std::string& v);

}  // namespace hpct::train::h5
