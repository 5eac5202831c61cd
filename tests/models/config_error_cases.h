// config.json error cases shared by the config tests: a base config with one edit, the
// status code expected and a fragment the message must hold.
//
//   const ConfigErrorCase e{"no heads", edited(base, [](Json& j) { j.erase("num_attention_heads"); }),
//                           StatusCode::kInvalidArgument, "num_attention_heads"};
#pragma once

#include <nlohmann/json.hpp>

#include "gearbox/status.h"

namespace gearbox::models {

struct ConfigErrorCase {
  const char* what;
  nlohmann::json config;
  StatusCode code;
  const char* message;
};

/// `config` with `edit` applied.
template <typename Edit>
nlohmann::json edited(nlohmann::json config, Edit edit) {
  edit(config);
  return config;
}

}  // namespace gearbox::models
