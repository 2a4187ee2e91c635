#pragma once
// Input decks: TOML files plus `--set section.key=value` overrides, typed and validated against a schema
// (docs/contracts.md). Every key an app reads is declared once in its schema with type, default, range and
// doc; `--help` prints the schema. Errors (unknown key or section, wrong type, out-of-range value,
// missing required section or key, unparsable TOML) are UsageErrors naming the key and the deck file.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace hpct {

// Lists: a TOML array, or (the compact form, also what --set takes) one string of comma-separated items:
//   mean = [0.485, 0.456, 0.406]    mean = "0.485,0.456,0.406"    --set data.mean=0.485,0.456,0.406
//   train = ["a.bin", "b.bin"]      train = "a.bin"               --set data.train=a.bin,b.bin   (--set k= : empty)
enum class ValueType { Int, Float, Bool, String, StringList, FloatList };
const char* value_type_name(ValueType t);

using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<std::string>, std::vector<double>>;

struct KeySpec {
  std::string name;  // "section.key"
  ValueType type = ValueType::Int;
  std::optional<ConfigValue> default_value;  // nullopt: the key is required
  std::string doc;
  std::optional<double> min, max;    // inclusive bounds (Int and Float; every item of a FloatList)
  std::vector<std::string> choices;  // allowed values (String); empty: any
};

struct SectionSpec {
  std::string name;
  bool required = false;
  std::string doc;
};

class ConfigSchema {
 public:
  ConfigSchema& section(std::string name, bool required, std::string doc);
  // Keys belong to a section declared before them. A nullopt default makes the key required.
  ConfigSchema& int_key(std::string name, std::optional<int64_t> def, std::string doc,
                        std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);
  ConfigSchema& float_key(std::string name, std::optional<double> def, std::string doc,
                          std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);
  ConfigSchema& bool_key(std::string name, std::optional<bool> def, std::string doc);
  ConfigSchema& string_key(std::string name, std::optional<std::string> def, std::string doc,
                           std::vector<std::string> choices = {});
  ConfigSchema& string_list_key(std::string name, std::optional<std::vector<std::string>> def, std::string doc);
  ConfigSchema& float_list_key(std::string name, std::optional<std::vector<double>> def, std::string doc,
                               std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);

  const KeySpec* find(const std::string& name) const;
  const SectionSpec* find_section(const std::string& name) const;
  const std::vector<SectionSpec>& sections() const { return sections_; }
  const std::vector<KeySpec>& keys() const { return keys_; }
  std::vector<std::string> keys_of(const std::string& section) const;
  // Every section and key with type, default (or "required"), range and doc: the body of --help.
  std::string help_text() const;

 private:
  ConfigSchema& add(KeySpec spec);
  std::vector<SectionSpec> sections_;
  std::vector<KeySpec> keys_;
};

class Config {
 public:
  // Parses deck_path, applies overrides ("section.key=value", in order; later ones win), validates.
  static Config load(const ConfigSchema& schema, const std::string& deck_path,
                     const std::vector<std::string>& overrides = {});
  // The same from deck text (deck_name is used in messages), for tests and for checkpoints.
  static Config parse(const ConfigSchema& schema, const std::string& deck_text, const std::string& deck_name,
                      const std::vector<std::string>& overrides = {});

  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_string_list(const std::string& key) const;
  const std::vector<double>& get_float_list(const std::string& key) const;
  bool was_set(const std::string& key) const;  // given in the deck or by --set (not a default)
  bool has_key(const std::string& key) const { return values_.count(key) > 0; }  // declared by the schema

  const std::string& deck_path() const { return deck_path_; }
  const std::string& deck_text() const { return deck_text_; }
  const std::vector<std::string>& overrides() const { return overrides_; }
  // The effective configuration (every key, defaults included) as TOML text, sorted by section.
  std::string effective_toml() const;

 private:
  const ConfigValue& value(const std::string& key, ValueType expected) const;
  std::map<std::string, ConfigValue> values_;
  std::map<std::string, bool> set_;
  std::string deck_path_, deck_text_;
  std::vector<std::string> overrides_;
};

}  // namespace hpct
