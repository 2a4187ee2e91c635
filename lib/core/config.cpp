#include "core/config.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace hpct {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::Int: return "integer";
    case ValueType::Float: return "float";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "string";
    case ValueType::StringList: return "list of strings";
    case ValueType::FloatList: return "list of floats";
  }
  return "?";
}

namespace {

// A TOML basic string: quotes, backslashes and control characters escaped.
std::string toml_quote(const std::string& x) {
  std::string out = "\"";
  for (unsigned char c : x) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\u{:04X}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// shortest text that reads back as the same double (the checkpoint stores the effective deck)
std::string format_double(double x) {
  const std::string s = fmt::format("{}", x);
  return s.find_first_of(".en") == std::string::npos ? s + ".0" : s;
}

std::string format_value(const ConfigValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<X, std::string>) {
          return toml_quote(x);
        } else if constexpr (std::is_same_v<X, double>) {
          return format_double(x);
        } else if constexpr (std::is_same_v<X, std::vector<std::string>> || std::is_same_v<X, std::vector<double>>) {
          std::string out = "[";
          for (size_t i = 0; i < x.size(); ++i) {
            if (i) out += ", ";
            if constexpr (std::is_same_v<X, std::vector<double>>) out += format_double(x[i]);
            else
              out += toml_quote(x[i]);
          }
          return out + "]";
        } else {
          return fmt::format("{}", x);
        }
      },
      v);
}

// A --set string or list item without one pair of surrounding quotes ("x" or 'x'), so strings need none.
std::string unquote(const std::string& s) {
  const bool quoted = s.size() >= 2 &&
                      ((s.front() == '"' && s.back() == '"') || (s.front() == '\'' && s.back() == '\''));
  return quoted ? s.substr(1, s.size() - 2) : s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The items of a compact list: comma-separated, blanks around items ignored, surrounding [ ] and quotes dropped.
std::vector<std::string> split_list(std::string text) {
  text = trim(text);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  std::vector<std::string> out;
  if (trim(text).empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(unquote(trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start))));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// A compact float list; a UsageError names the key, the text and the item that is not a number.
std::vector<double> parse_float_list(const KeySpec& spec, const std::string& text, const std::string& where) {
  std::vector<double> out;
  for (const std::string& item : split_list(text)) {
    char* end = nullptr;
    const double v = item.empty() ? 0.0 : std::strtod(item.c_str(), &end);
    HPCT_USAGE_CHECK(!item.empty() && end == item.c_str() + item.size(),
                     "{}: {} = \"{}\": \"{}\" is not a number; give comma-separated numbers", where, spec.name, text,
                     item);
    out.push_back(v);
  }
  return out;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// Range and choice checks shared by deck values and --set values; `where` names the source.
void validate(const KeySpec& spec, const ConfigValue& v, const std::string& where) {
  if (const auto* list = std::get_if<std::vector<double>>(&v)) {
    for (double item : *list) validate(spec, item, where);
    return;
  }
  double x = 0;
  if (std::holds_alternative<int64_t>(v)) x = static_cast<double>(std::get<int64_t>(v));
  else if (std::holds_alternative<double>(v))
    x = std::get<double>(v);
  if ((spec.type == ValueType::Float || spec.type == ValueType::FloatList) && !std::isfinite(x))
    HPCT_USAGE_FAIL("{}: {} must be a finite number, is {}", where, spec.name, format_value(v));
  if (spec.min && x < *spec.min)
    HPCT_USAGE_FAIL("{}: {} = {} is out of range: it must be >= {}", where, spec.name, format_value(v), *spec.min);
  if (spec.max && x > *spec.max)
    HPCT_USAGE_FAIL("{}: {} = {} is out of range: it must be <= {}", where, spec.name, format_value(v), *spec.max);
  if (!spec.choices.empty()) {
    const auto& s = std::get<std::string>(v);
    bool ok = false;
    for (const auto& c : spec.choices) ok = ok || c == s;
    if (!ok)
      HPCT_USAGE_FAIL("{}: {} = \"{}\" is not allowed: choose one of {}", where, spec.name, s, join(spec.choices));
  }
}

std::string unknown_key_message(const ConfigSchema& schema, const std::string& key, const std::string& where) {
  const std::string sec = section_of(key);
  if (!schema.find_section(sec)) {
    std::vector<std::string> names;
    for (const auto& s : schema.sections()) names.push_back("[" + s.name + "]");
    return fmt::format("{}: unknown section [{}] (key {}); known sections: {}", where, sec, key, join(names));
  }
  return fmt::format("{}: unknown key {}; the keys of [{}] are: {} (see --help)", where, key, sec,
                     join(schema.keys_of(sec)));
}

const char* toml_type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    default: return "date/time";
  }
}

ConfigValue from_toml(const KeySpec& spec, const toml::node& node, const std::string& where) {
  auto wrong = [&]() -> ConfigValue {
    HPCT_USAGE_FAIL("{}: {} must be of type {}, got a TOML {}", where, spec.name, value_type_name(spec.type),
                    toml_type_name(node.type()));
  };
  switch (spec.type) {
    case ValueType::Int:
      if (auto v = node.value_exact<int64_t>()) return *v;
      return wrong();
    case ValueType::Float:
      if (node.is_integer()) return static_cast<double>(*node.value_exact<int64_t>());
      if (auto v = node.value_exact<double>()) return *v;
      return wrong();
    case ValueType::Bool:
      if (auto v = node.value_exact<bool>()) return *v;
      return wrong();
    case ValueType::String:
      if (auto v = node.value_exact<std::string>()) return *v;
      return wrong();
    case ValueType::StringList: {
      if (auto v = node.value_exact<std::string>()) return split_list(*v);
      std::vector<std::string> out;
      if (!node.is_array()) return wrong();
      for (const toml::node& item : *node.as_array()) {
        auto v = item.value_exact<std::string>();
        if (!v) return wrong();
        out.push_back(*v);
      }
      return out;
    }
    case ValueType::FloatList: {
      if (auto v = node.value_exact<std::string>()) return parse_float_list(spec, *v, where);
      if (node.is_integer() || node.is_floating_point()) return std::vector<double>{*node.value<double>()};
      std::vector<double> out;
      if (!node.is_array()) return wrong();
      for (const toml::node& item : *node.as_array()) {
        if (!item.is_integer() && !item.is_floating_point()) return wrong();
        out.push_back(*item.value<double>());
      }
      return out;
    }
  }
  return wrong();
}

ConfigValue from_text(const KeySpec& spec, std::string text, const std::string& where) {
  auto fail = [&]() -> ConfigValue {
    HPCT_USAGE_FAIL("{}: '{}' is not a valid {} for {} ({})", where, text, value_type_name(spec.type), spec.name,
                    spec.doc);
  };
  switch (spec.type) {
    case ValueType::Int: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || text.empty()) return fail();
      return v;
    }
    case ValueType::Float: {
      if (text.empty()) return fail();
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size()) return fail();
      return v;
    }
    case ValueType::Bool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      return fail();
    case ValueType::String: return unquote(text);
    case ValueType::StringList: return split_list(text);
    case ValueType::FloatList: return parse_float_list(spec, text, where);
  }
  return fail();
}

}  // namespace

// ---- schema ------------------------------------------------------------------------------------

ConfigSchema& ConfigSchema::section(std::string name, bool required, std::string doc) {
  sections_.push_back({std::move(name), required, std::move(doc)});
  return *this;
}

ConfigSchema& ConfigSchema::add(KeySpec spec) {
  HPCT_CHECK(spec.name.find('.') != std::string::npos, "key {} must be section.key", spec.name);
  HPCT_CHECK(find_section(section_of(spec.name)) != nullptr, "key {}: declare its section first", spec.name);
  HPCT_CHECK(find(spec.name) == nullptr, "key {} declared twice", spec.name);
  keys_.push_back(std::move(spec));
  return *this;
}

ConfigSchema& ConfigSchema::int_key(std::string name, std::optional<int64_t> def, std::string doc,
                                    std::optional<double> min, std::optional<double> max) {
  KeySpec s{std::move(name), ValueType::Int, std::nullopt, std::move(doc), min, max, {}};
  if (def) s.default_value = *def;
  return add(std::move(s));
}
ConfigSchema& ConfigSchema::float_key(std::string name, std::optional<double> def, std::string doc,
                                      std::optional<double> min, std::optional<double> max) {
  KeySpec s{std::move(name), ValueType::Float, std::nullopt, std::move(doc), min, max, {}};
  if (def) s.default_value = *def;
  return add(std::move(s));
}
ConfigSchema& ConfigSchema::bool_key(std::string name, std::optional<bool> def, std::string doc) {
  KeySpec s{std::move(name), ValueType::Bool, std::nullopt, std::move(doc), std::nullopt, std::nullopt, {}};
  if (def) s.default_value = *def;
  return add(std::move(s));
}
ConfigSchema& ConfigSchema::string_key(std::string name, std::optional<std::string> def, std::string doc,
                                       std::vector<std::string> choices) {
  KeySpec s{std::move(name), ValueType::String, std::nullopt,      std::move(doc),
            std::nullopt,    std::nullopt,      std::move(choices)};
  if (def) s.default_value = *def;
  return add(std::move(s));
}

ConfigSchema& ConfigSchema::string_list_key(std::string name, std::optional<std::vector<std::string>> def,
                                            std::string doc) {
  KeySpec s{std::move(name), ValueType::StringList, std::nullopt, std::move(doc), std::nullopt, std::nullopt, {}};
  if (def) s.default_value = *def;
  return add(std::move(s));
}
ConfigSchema& ConfigSchema::float_list_key(std::string name, std::optional<std::vector<double>> def, std::string doc,
                                           std::optional<double> min, std::optional<double> max) {
  KeySpec s{std::move(name), ValueType::FloatList, std::nullopt, std::move(doc), min, max, {}};
  if (def) s.default_value = *def;
  return add(std::move(s));
}

const KeySpec* ConfigSchema::find(const std::string& name) const {
  for (const auto& k : keys_)
    if (k.name == name) return &k;
  return nullptr;
}
const SectionSpec* ConfigSchema::find_section(const std::string& name) const {
  for (const auto& s : sections_)
    if (s.name == name) return &s;
  return nullptr;
}
std::vector<std::string> ConfigSchema::keys_of(const std::string& section) const {
  std::vector<std::string> out;
  for (const auto& k : keys_)
    if (section_of(k.name) == section) out.push_back(k.name);
  return out;
}

std::string ConfigSchema::help_text() const {
  std::string out;
  for (const auto& sec : sections_) {
    out += fmt::format("\n[{}]{}  {}\n", sec.name, sec.required ? " (required section)" : "", sec.doc);
    for (const auto& k : keys_) {
      if (section_of(k.name) != sec.name) continue;
      std::string range;
      if (k.min && k.max) range = fmt::format(", in [{}, {}]", *k.min, *k.max);
      else if (k.min)
        range = fmt::format(", >= {}", *k.min);
      else if (k.max)
        range = fmt::format(", <= {}", *k.max);
      if (!k.choices.empty()) range = ", one of " + join(k.choices);
      out += fmt::format("  {:<26} {:<7} {:<14} {}{}\n", k.name, value_type_name(k.type),
                         k.default_value ? "= " + format_value(*k.default_value) : "(required)", k.doc, range);
    }
  }
  return out;
}

// ---- config ------------------------------------------------------------------------------------

Config Config::load(const ConfigSchema& schema, const std::string& deck_path,
                    const std::vector<std::string>& overrides) {
  std::ifstream in(deck_path);
  HPCT_USAGE_CHECK(in.good(),
                   "deck file '{}' not found or not readable (the decks shipped with hpctrain are in inputs/)",
                   deck_path);
  std::stringstream ss;
  ss << in.rdbuf();
  Config c = parse(schema, ss.str(), deck_path, overrides);
  return c;
}

Config Config::parse(const ConfigSchema& schema, const std::string& deck_text, const std::string& deck_name,
                     const std::vector<std::string>& overrides) {
  Config c;
  c.deck_path_ = deck_name;
  c.deck_text_ = deck_text;
  c.overrides_ = overrides;
  const std::string where = "deck " + deck_name;

  toml::table tbl;
  try {
    tbl = toml::parse(deck_text, deck_name);
  } catch (const toml::parse_error& e) {
    HPCT_USAGE_FAIL("{}: TOML syntax error at line {}, column {}: {}", where, e.source().begin.line,
                    e.source().begin.column, e.description());
  }

  for (const auto& [sec_key, sec_node] : tbl) {
    const std::string sec(sec_key.str());
    if (!sec_node.is_table()) HPCT_USAGE_FAIL("{}: top-level key '{}' must be a [section]", where, sec);
    if (!schema.find_section(sec)) HPCT_USAGE_FAIL("{}", unknown_key_message(schema, sec + ".?", where));
    for (const auto& [k, node] : *sec_node.as_table()) {
      const std::string name = sec + "." + std::string(k.str());
      const KeySpec* spec = schema.find(name);
      if (!spec) HPCT_USAGE_FAIL("{}", unknown_key_message(schema, name, where));
      ConfigValue v = from_toml(*spec, node, where);
      validate(*spec, v, where);
      c.values_[name] = std::move(v);
      c.set_[name] = true;
    }
  }

  for (const auto& ov : overrides) {
    const std::string w = "--set " + ov;
    const auto eq = ov.find('=');
    HPCT_USAGE_CHECK(eq != std::string::npos && eq > 0, "{}: expected section.key=value", w);
    const std::string name = ov.substr(0, eq);
    const KeySpec* spec = schema.find(name);
    if (!spec) HPCT_USAGE_FAIL("{}", unknown_key_message(schema, name, w));
    ConfigValue v = from_text(*spec, ov.substr(eq + 1), w);
    validate(*spec, v, w);
    c.values_[name] = std::move(v);
    c.set_[name] = true;
  }

  for (const auto& sec : schema.sections()) {
    if (!sec.required) continue;
    bool present = tbl.contains(sec.name);
    for (const auto& [k, _] : c.set_) present = present || section_of(k) == sec.name;
    HPCT_USAGE_CHECK(present, "{}: missing required section [{}] ({}); see --help for its keys", where, sec.name,
                     sec.doc);
  }
  for (const auto& spec : schema.keys()) {
    if (c.values_.count(spec.name)) continue;
    HPCT_USAGE_CHECK(spec.default_value.has_value(), "{}: missing required key {} ({}: {})", where, spec.name,
                     value_type_name(spec.type), spec.doc);
    c.values_[spec.name] = *spec.default_value;
  }
  return c;
}

const ConfigValue& Config::value(const std::string& key, ValueType expected) const {
  auto it = values_.find(key);
  HPCT_CHECK(it != values_.end(), "config key {} is not in the schema", key);
  // the variant's alternatives are in ValueType's order
  HPCT_CHECK(it->second.index() == static_cast<size_t>(expected), "config key {} read as {}", key,
             value_type_name(expected));
  return it->second;
}

int64_t Config::get_int(const std::string& key) const { return std::get<int64_t>(value(key, ValueType::Int)); }
double Config::get_float(const std::string& key) const { return std::get<double>(value(key, ValueType::Float)); }
bool Config::get_bool(const std::string& key) const { return std::get<bool>(value(key, ValueType::Bool)); }
const std::string& Config::get_string(const std::string& key) const {
  return std::get<std::string>(value(key, ValueType::String));
}
const std::vector<std::string>& Config::get_string_list(const std::string& key) const {
  return std::get<std::vector<std::string>>(value(key, ValueType::StringList));
}
const std::vector<double>& Config::get_float_list(const std::string& key) const {
  return std::get<std::vector<double>>(value(key, ValueType::FloatList));
}
bool Config::was_set(const std::string& key) const { return set_.count(key) > 0; }

std::string Config::effective_toml() const {
  std::string out, current;
  for (const auto& [k, v] : values_) {
    const std::string sec = section_of(k);
    if (sec != current) {
      out += (current.empty() ? "" : "\n") + fmt::format("[{}]\n", sec);
      current = sec;
    }
    out += fmt::format("{} = {}\n", k.substr(k.find('.') + 1), format_value(v));
  }
  return out;
}

}  // namespace hpct
