#include "flags.h"

#include <charconv>
#include <cstdio>

#include "cli_args.h"

namespace gearbox::cli {

void Flags::flag(std::string name, std::string* out) {
  specs_.push_back({std::move(name), true, [out](std::string_view v) {
                      *out = std::string(v);
                      return Status();
                    }});
}

void Flags::flag(std::string name, int64_t* out) {
  const std::string flag_name = name;
  specs_.push_back({std::move(name), true, [out, flag_name](std::string_view v) -> Status {
                      Result<int64_t> n = parse_int(v, flag_name);
                      if (!n.ok()) return n.status();
                      *out = *n;
                      return Status();
                    }});
}

void Flags::flag(std::string name, double* out) {
  const std::string flag_name = name;
  specs_.push_back({std::move(name), true, [out, flag_name](std::string_view v) -> Status {
                      double d = 0;
                      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), d);
                      if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
                        return invalid_argument(flag_name + ": '" + std::string(v) + "' is not a number");
                      }
                      *out = d;
                      return Status();
                    }});
}

void Flags::flag(std::string name, std::vector<std::string>* out) {
  specs_.push_back({std::move(name), true, [out](std::string_view v) {
                      out->emplace_back(v);
                      return Status();
                    }});
}

void Flags::positional(std::string name, std::string* out, bool required) {
  positionals_.push_back({std::move(name), out, required});
}

Status Flags::parse(std::span<const std::string_view> args) {
  size_t next_positional = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      return {};
    }
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (a[1] >= '0' && a[1] <= '9'))) {
      const Spec* spec = nullptr;
      for (const Spec& s : specs_) {
        if (s.name == a) spec = &s;
      }
      if (spec == nullptr) return invalid_argument("unknown flag '" + std::string(a) + "' (see --help)");
      given_.push_back(spec->name);
      if (!spec->takes_value) {
        if (Status s = spec->set({}); !s.ok()) return s;
        continue;
      }
      if (i + 1 >= args.size()) return invalid_argument(spec->name + " needs a value");
      if (Status s = spec->set(args[++i]); !s.ok()) return s;
      continue;
    }
    if (next_positional >= positionals_.size()) return invalid_argument("unexpected argument '" + std::string(a) + "'");
    *positionals_[next_positional++].out = std::string(a);
  }
  for (size_t p = next_positional; p < positionals_.size(); ++p) {
    if (positionals_[p].required) return invalid_argument("missing " + positionals_[p].name + " (see --help)");
  }
  return {};
}

int fail(std::string_view command, const Status& status, int code) {
  std::fprintf(stderr, "gearbox %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.message().c_str());
  return code;
}

}  // namespace gearbox::cli
