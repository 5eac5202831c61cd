# cmake -DSOURCE=DIR -DTOKENIZER=FILE -DDEST=DIR -P copy_checkpoint.cmake
# DEST becomes a copy of checkpoint SOURCE's config.json and model.safetensors with FILE as
# its tokenizer.json, and no tokenizer.model: a checkpoint that ships only tokenizer.json.
file(REMOVE_RECURSE "${DEST}")
file(MAKE_DIRECTORY "${DEST}")
file(COPY "${SOURCE}/config.json" "${SOURCE}/model.safetensors" DESTINATION "${DEST}")
file(COPY_FILE "${TOKENIZER}" "${DEST}/tokenizer.json")
if(EXISTS "${DEST}/tokenizer.model")
  message(FATAL_ERROR "${DEST} must not have a tokenizer.model")
endif()
message("checkpoint with only tokenizer.json: ${DEST}")
