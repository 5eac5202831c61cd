#include "cli_args.h"

#include <charconv>

namespace gearbox::cli {

Result<int64_t> parse_int(std::string_view text, std::string_view flag) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return invalid_argument(std::string(flag) + ": '" + std::string(text) + "' is not a whole number");
  }
  return value;
}

Result<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view flag) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t stop = comma == std::string_view::npos ? text.size() : comma;
    Result<int64_t> v = parse_int(text.substr(start, stop - start), flag);
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
  int64_t* fields[] = {&p.min, &p.opt, &p.max};
  for (int i = 0; i < 3; ++i) {
    Result<int64_t> v = parse_int(parts[static_cast<size_t>(i) + 1], "--profile");
    if (!v.ok()) return v.status();
    *fields[i] = *v;
  }
  if (p.min < 1 || p.min > p.opt || p.opt > p.max) {
    return invalid_argument("--profile " + std::string(text) + ": need 1 <= MIN <= OPT <= MAX");
  }
  return p;
}

}  // namespace gearbox::cli
