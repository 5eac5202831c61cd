#include "cli_args.h"

#include <charconv>
#include <cstdio>
#include <limits>

#include <CLI/CLI.hpp>

namespace gearbox::cli {
namespace {

// The message of a bad whole number, without the flag (CLI11 puts "--flag: " before it).
std::string not_a_whole_number(std::string_view text) { return "'" + std::string(text) + "' is not a whole number"; }

std::string joined(const std::vector<int64_t>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i > 0 ? "," : "") + std::to_string(values[i]);
  return s;
}

}  // namespace

Result<int64_t> parse_int(std::string_view text, std::string_view what) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return invalid_argument(std::string(what) + ": " + not_a_whole_number(text));
  }
  return value;
}

Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t stop = comma == std::string_view::npos ? text.size() : comma;
    Result<int64_t> v = parse_int(text.substr(start, stop - start), what);
    if (!v.ok()) return v.status();
    values.push_back(*v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return values;
}

Result<SeqProfile> parse_seq_profile(std::string_view text) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t colon; (colon = text.find(':', start)) != std::string_view::npos; start = colon + 1) {
    parts.push_back(text.substr(start, colon - start));
  }
  parts.push_back(text.substr(start));
  if (parts.size() != 4 || parts[0].empty()) {
    return invalid_argument("--profile: '" + std::string(text) + "' is not NAME:MIN:OPT:MAX (e.g. prefill:1:128:2048)");
  }
  SeqProfile p;
  p.name = std::string(parts[0]);
  int64_t* seqs[] = {&p.min, &p.opt, &p.max};
  int64_t* batches[] = {&p.min_batch, &p.opt_batch, &p.max_batch};
  for (size_t i = 0; i < 3; ++i) {
    // BxS (batch x sequence, as trtexec writes shapes), or a plain N meaning 1xN.
    const std::string_view bound = parts[i + 1];
    const size_t x = bound.find('x');
    const auto not_a_bound = [&] {
      return invalid_argument("--profile: '" + std::string(bound) + "' is neither a whole number N nor BxS");
    };
    if (x != std::string_view::npos) {
      Result<int64_t> b = parse_int(bound.substr(0, x), "--profile");
      if (!b.ok()) return not_a_bound();
      *batches[i] = *b;
      Result<int64_t> v = parse_int(bound.substr(x + 1), "--profile");
      if (!v.ok()) return not_a_bound();
      *seqs[i] = *v;
      continue;
    }
    Result<int64_t> v = parse_int(bound, "--profile");
    if (!v.ok()) return v.status();
    *seqs[i] = *v;
  }
  if (p.min < 1 || p.min > p.opt || p.opt > p.max) {
    return invalid_argument("--profile " + std::string(text) + ": need 1 <= MIN <= OPT <= MAX");
  }
  if (p.min_batch < 1 || p.min_batch > p.opt_batch || p.opt_batch > p.max_batch) {
    return invalid_argument("--profile " + std::string(text) + ": need 1 <= the batches of MIN <= OPT <= MAX");
  }
  return p;
}

CLI::Option* add_int_option(CLI::App& app, const std::string& name, int64_t& value, const std::string& help) {
  return add_int_option(app, name, value, help, std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max());
}

CLI::Option* add_int_option(CLI::App& app, const std::string& name, int64_t& value, const std::string& help,
                            int64_t min, int64_t max) {
  // CLI11 reads integers with strtoll in base 0 ("010" is 8) and does not report overflow,
  // so the value is checked here and handed on in canonical decimal.
  const CLI::Validator whole_number(
      [min, max](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (text.empty() || ec != std::errc() || ptr != end) return not_a_whole_number(text);
        if (v < min || v > max) {
          return "'" + text + "' is outside [" + std::to_string(min) + ", " +
                 (max == std::numeric_limits<int64_t>::max() ? std::string("...") : std::to_string(max)) + "]";
        }
        text = std::to_string(v);
        return {};
      },
      "");
  return app.add_option(name, value, help)->transform(whole_number)->type_name("N");
}

CLI::Option* add_name_option(CLI::App& app, const std::string& name, std::string& value, const std::string& help) {
  const CLI::Validator non_empty(
      [](const std::string& text) -> std::string { return text.empty() ? "the name is empty" : std::string(); }, "");
  return app.add_option(name, value, help)->check(non_empty)->type_name("NAME");
}

CLI::Option* add_number_option(CLI::App& app, const std::string& name, double& value, const std::string& help) {
  const CLI::Validator number(
      [](const std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (text.empty() || ec != std::errc() || ptr != end) return "'" + text + "' is not a number";
        return {};
      },
      "");
  return app.add_option(name, value, help)->check(number)->type_name("X");
}

CLI::Option* add_int_list_option(CLI::App& app, const std::string& name, std::vector<int64_t>& values,
                                 const std::string& help) {
  const std::string defaults = joined(values);
  return app
      .add_option_function<std::string>(
          name,
          [&values, name](const std::string& text) {
            Result<std::vector<int64_t>> parsed = parse_int_list(text, name);
            if (!parsed.ok()) throw CLI::ValidationError(parsed.status().message());
            values = std::move(*parsed);
          },
          help)
      ->type_name("N,N,...")
      ->default_str(defaults);
}

CLI::Option* add_profile_option(CLI::App& app, std::vector<SeqProfile>& profiles, const std::string& help) {
  return app
      .add_option_function<std::vector<std::string>>(
          "--profile",
          [&profiles](const std::vector<std::string>& texts) {
            for (const std::string& text : texts) {
              Result<SeqProfile> p = parse_seq_profile(text);
              if (!p.ok()) throw CLI::ValidationError(p.status().message());
              profiles.push_back(std::move(*p));
            }
          },
          help)
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("NAME:MIN:OPT:MAX (each N or BxS)");
}

int fail(std::string_view command, const Status& status, int code) {
  std::fprintf(stderr, "gearbox %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.message().c_str());
  return code;
}

}  // namespace gearbox::cli
