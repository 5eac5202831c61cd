// The BPE model of tokenizer.json: one pre-token to ids.
#include <queue>

#include "tokenizer_json_internal.h"

namespace gearbox::cli::hf_json {

// `tokenizers`' BPE::tokenize (models/bpe/model.rs) for one pre-token: characters, byte
// fallback or unk for those outside the vocabulary, then merges by rank (word.rs merge_all).
Status Bpe::tokenize(std::string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return {};
  if (ignore_merges) {
    if (const auto it = vocab.find(std::string(word)); it != vocab.end()) {
      out.push_back(it->second);
      return {};
    }
  }
  struct Symbol {
    int64_t id;
    int64_t prev;
    int64_t next;
    size_t len;  // bytes; 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int64_t id, size_t len) {
    const auto n = static_cast<int64_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = n;
    symbols.push_back({id, symbols.empty() ? -1 : n - 1, -1, len});
  };
  // A pending run of unknown characters: its unk id and bytes (unk_bytes == 0: none). Plain
  // variables, not an optional pair, which GCC 12 misreads as maybe-uninitialized at -O2.
  int64_t unk_id = -1;
  size_t unk_bytes = 0;
  for (size_t i = 0; i < word.size();) {
    const size_t len = char_length(word, i);
    const std::string c(word.substr(i, len));
    i += len;
    if (const auto it = vocab.find(c); it != vocab.end()) {
      if (unk_bytes > 0) add(unk_id, unk_bytes);
      unk_bytes = 0;
      add(it->second, len);
      continue;
    }
    if (byte_fallback &&
        std::all_of(c.begin(), c.end(), [&](char b) { return byte_ids[static_cast<unsigned char>(b)] >= 0; })) {
      for (const char b : c) add(byte_ids[static_cast<unsigned char>(b)], 1);
      continue;  // (like `tokenizers`, without flushing a pending unk first)
    }
    if (!unk_token) continue;  // no unk token: `tokenizers` drops the character
    const auto unk_it = vocab.find(*unk_token);
    if (unk_it == vocab.end()) {
      return invalid_argument("the text has a character outside the tokenizer's vocabulary, and its unk_token '" +
                              *unk_token + "' is not in the vocabulary either");
    }
    if (unk_bytes > 0 && fuse_unk) {
      unk_bytes += len;
    } else {
      if (unk_bytes > 0) add(unk_id, unk_bytes);
      unk_id = unk_it->second;
      unk_bytes = len;
    }
  }
  if (unk_bytes > 0) add(unk_id, unk_bytes);

  struct Candidate {
    uint32_t rank;
    size_t pos;
    int64_t id;
  };
  // A min-heap on (rank, pos).
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) queue.push({m->rank, i, m->id});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const auto next_pos = static_cast<size_t>(left.next);
    const Symbol right = symbols[next_pos];
    const Merge* current = find_merge(left.id, right.id);
    if (current == nullptr || current->id != top.id) continue;  // an outdated candidate
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next > -1 && static_cast<size_t>(right.next) < symbols.size()) {
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
    }
    if (left.prev >= 0) {
      const auto prev = static_cast<size_t>(left.prev);
      if (const Merge* m = find_merge(symbols[prev].id, left.id)) queue.push({m->rank, prev, m->id});
    }
    if (left.next >= 0 && static_cast<size_t>(left.next) < symbols.size()) {
      if (const Merge* m = find_merge(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        queue.push({m->rank, top.pos, m->id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
  return {};
}

}  // namespace gearbox::cli::hf_json
