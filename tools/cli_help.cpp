#include "cli_help.h"

#include <algorithm>
#include <vector>

namespace gearbox::cli {
namespace {

constexpr size_t kWidth = 96;      // the widest line help prints
constexpr size_t kMaxColumn = 32;  // where option descriptions start, at most
constexpr size_t kCommandColumn = 14;

// `text` wrapped at kWidth: each line of it (a '\n' is kept) broken between words, the
// continuation lines indented by `indent` spaces. The first line starts at column `indent`.
std::string wrap(const std::string& text, size_t indent) {
  std::string out;
  size_t line_start = 0;
  while (line_start <= text.size()) {
    const size_t line_end = std::min(text.find('\n', line_start), text.size());
    size_t column = indent;
    bool first_word = true;
    for (size_t word = line_start; word < line_end;) {
      const size_t word_end = std::min(text.find(' ', word), line_end);
      const size_t length = word_end - word;
      if (!first_word && column + 1 + length > kWidth) {
        out += "\n" + std::string(indent, ' ');
        column = indent;
        first_word = true;
      }
      if (!first_word) {
        out += ' ';
        ++column;
      }
      out.append(text, word, length);
      column += length;
      first_word = false;
      word = word_end + 1;
    }
    if (line_end >= text.size()) break;
    out += "\n" + std::string(indent, ' ');
    line_start = line_end + 1;
  }
  return out;
}

std::string summary(const std::string& description) { return description.substr(0, description.find('\n')); }

}  // namespace

std::string HelpFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode /*mode*/) const {
  const std::vector<const CLI::Option*> positionals =
      app->get_options([](const CLI::Option* o) { return o->get_positional() && !o->get_group().empty(); });
  const std::vector<const CLI::Option*> options = app->get_options([app](const CLI::Option* o) {
    return o->nonpositional() && !o->get_group().empty() && o != app->get_help_ptr();
  });
  const std::vector<const CLI::App*> commands = app->get_subcommands([](const CLI::App*) { return true; });

  std::string out = "usage: " + name;
  for (const CLI::Option* p : positionals) {
    out += " " + (p->get_required() ? p->get_name(true) : "[" + p->get_name(true) + "]");
  }
  if (!commands.empty()) out += " <command>";
  if (!options.empty()) out += " [options]";
  out += "\n";
  if (!app->get_description().empty()) out += "\n" + wrap(app->get_description(), 0) + "\n";
  if (!commands.empty()) {
    out += "\ncommands:\n";
    for (const CLI::App* c : commands) {
      std::string left = "  " + c->get_name();
      left.resize(std::max(kCommandColumn, left.size() + 1), ' ');
      out += left + wrap(summary(c->get_description()), kCommandColumn) + "\n";
    }
  }
  if (!options.empty()) {
    out += "\noptions:\n";
    std::vector<std::string> lefts;
    size_t column = 0;
    for (const CLI::Option* o : options) {
      std::string left = "  " + o->get_name(false, true);
      if (o->get_type_size() != 0 && !o->get_type_name().empty()) left += " " + o->get_type_name();
      lefts.push_back(left);
      column = std::max(column, left.size() + 2);
    }
    column = std::min(column, kMaxColumn);
    for (size_t i = 0; i < options.size(); ++i) {
      const CLI::Option* o = options[i];
      std::string text = o->get_description();
      if (o->get_type_size() != 0 && !o->get_default_str().empty()) {
        text += std::string(text.empty() ? "" : " ") + "(default " + o->get_default_str() + ")";
      }
      std::string left = lefts[i];
      if (left.size() + 1 > column) {
        left += "\n";
        left.append(column, ' ');
      } else {
        left.resize(column, ' ');
      }
      out += left + wrap(text, column) + "\n";
    }
  }
  if (!app->get_footer().empty()) out += "\n" + wrap(app->get_footer(), 0) + "\n";
  return out;
}

}  // namespace gearbox::cli
