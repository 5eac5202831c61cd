#include "devices/cuda/fusion_plan.h"

#include "ir/shape_inference.h"

namespace gearbox::internal {

using ir::Network;
using ir::Node;
using ir::OpKind;

std::vector<Step> plan_steps(const Network& net, bool fuse) {
  std::vector<int> readers(net.tensors.size(), 0);
  for (const Node& node : net.nodes) {
    for (int32_t t : node.inputs) ++readers[static_cast<size_t>(t)];
  }
  for (int32_t t : net.outputs) ++readers[static_cast<size_t>(t)];
  auto node = [&](size_t i) -> const Node* { return i < net.nodes.size() ? &net.nodes[i] : nullptr; };
  auto only_reader_is = [&](const Node& producer, const Node* consumer, size_t input) {
    return consumer != nullptr && readers[static_cast<size_t>(producer.outputs[0])] == 1 &&
           consumer->inputs.size() > input && consumer->inputs[input] == producer.outputs[0];
  };
  auto wtype = [&](const Node& n) { return net.weights[static_cast<size_t>(n.weights[0])].dtype; };
  auto same_norm = [&](const Node& a, const Node& b) {
    return a.attrs.eps == b.attrs.eps && a.attrs.weight_offset == b.attrs.weight_offset &&
           a.attrs.head_dim == b.attrs.head_dim && wtype(a) == wtype(b);
  };
  auto head_norm = [](const Node* n) {
    return n != nullptr && n->kind == OpKind::kRmsNorm && n->attrs.head_dim > 0 && n->attrs.head_dim % 2 == 0 &&
           n->attrs.head_dim <= 1024;
  };
  auto row_norm = [](const Node* n) { return n != nullptr && n->kind == OpKind::kRmsNorm && n->attrs.head_dim == 0; };
  auto rope_of = [&](const Node& norm, const Node* rope) {
    return rope != nullptr && rope->kind == OpKind::kRope && rope->attrs.head_dim == norm.attrs.head_dim &&
           only_reader_is(norm, rope, 0);
  };

  // Two ropes at the same positions and head_dim, which head_norm_rope rotates in one launch.
  auto rope_pair = [](const Node* a, const Node* b) {
    return a != nullptr && b != nullptr && a->kind == OpKind::kRope && b->kind == OpKind::kRope &&
           a->inputs[1] == b->inputs[1] && a->attrs.head_dim == b->attrs.head_dim && a->attrs.head_dim > 0 &&
           a->attrs.head_dim % 2 == 0 && a->attrs.head_dim <= 1024;
  };

  auto gated_pair = [&](const Node* linear, const Node* act) {
    if (linear == nullptr || act == nullptr || linear->kind != OpKind::kLinear || linear->outputs.size() != 2 ||
        (act->kind != OpKind::kGeluTanhMul && act->kind != OpKind::kSiluMul)) {
      return false;
    }
    const auto gate = static_cast<size_t>(linear->outputs[0]), up = static_cast<size_t>(linear->outputs[1]);
    const auto& w = net.weights;
    return act->inputs[0] == linear->outputs[0] && act->inputs[1] == linear->outputs[1] && readers[gate] == 1 &&
           readers[up] == 1 &&
           w[static_cast<size_t>(linear->weights[0])].dims == w[static_cast<size_t>(linear->weights[1])].dims;
  };

  std::vector<Step> steps;
  for (size_t i = 0; i < net.nodes.size();) {
    const Node* a = node(i);
    const Node *b = node(i + 1), *c = node(i + 2), *d = node(i + 3);
    if (fuse && head_norm(a) && head_norm(b) && same_norm(*a, *b) && rope_of(*a, c) && rope_of(*b, d) &&
        c->inputs[1] == d->inputs[1]) {
      const Node* e = node(i + 4);
      steps.push_back({Step::kHeadNormRope, {i, i + 1, i + 2, i + 3}});
      steps.back().feeds_attention = e != nullptr && e->kind == OpKind::kAttention && only_reader_is(*c, e, 0) &&
                                     only_reader_is(*d, e, 1) && e->inputs[3] == c->inputs[1] &&
                                     c->attrs.theta == d->attrs.theta && c->attrs.scale == d->attrs.scale &&
                                     c->weights == d->weights;
      i += 4;
    } else if (fuse && head_norm(a) && rope_of(*a, b)) {
      steps.push_back({Step::kHeadNormRope, {i, i + 1}});
      i += 2;
    } else if (fuse && rope_pair(a, b)) {
      steps.push_back({Step::kRopes, {i, i + 1}});
      i += 2;
    } else if (fuse && a->kind == OpKind::kAdd && row_norm(b) && b->inputs[0] == a->outputs[0]) {
      const bool feeds_linear = c != nullptr && c->kind == OpKind::kLinear && only_reader_is(*b, c, 0);
      steps.push_back({Step::kAddNorm, {i, i + 1}, feeds_linear});
      i += 2;
    } else if (fuse && row_norm(a) && b != nullptr && b->kind == OpKind::kAdd &&
               (only_reader_is(*a, b, 1) || only_reader_is(*a, b, 0))) {
      if (row_norm(c) && same_norm(*a, *c) && c->inputs[0] == b->outputs[0]) {
        const bool feeds_linear = d != nullptr && d->kind == OpKind::kLinear && only_reader_is(*c, d, 0);
        steps.push_back({Step::kNormAddNorm, {i, i + 1, i + 2}, feeds_linear});
        i += 3;
      } else {
        steps.push_back({Step::kNormAddNorm, {i, i + 1}});
        i += 2;
      }
    } else if (fuse && gated_pair(a, b)) {
      if (c != nullptr && c->kind == OpKind::kLinear && c->outputs.size() == 1 && only_reader_is(*b, c, 0)) {
        steps.push_back({Step::kGatedLinear, {i, i + 1, i + 2}});
        i += 3;
      } else {
        steps.push_back({Step::kGatedLinear, {i, i + 1}});
        i += 2;
      }
    } else {
      steps.push_back({Step::kSingle, {i}});
      i += 1;
    }
  }
  for (size_t st = 0; fuse && st + 1 < steps.size(); ++st) {
    const Step& next = steps[st + 1];
    if (steps[st].kind != Step::kSingle || next.kind != Step::kHeadNormRope || next.nodes.size() != 4) continue;
    const Node& linear = net.nodes[steps[st].nodes[0]];
    const Node& q_norm = net.nodes[next.nodes[0]];
    const Node& k_norm = net.nodes[next.nodes[1]];
    const auto read_once = [&](int32_t t) { return readers[static_cast<size_t>(t)] == 1; };
    steps[st].stacked_into_head_norm =
        linear.kind == OpKind::kLinear && linear.outputs.size() == 3 && linear.attrs.has_bias == 0 &&
        ir::linear_weights_stacked(net, linear) && q_norm.inputs[0] == linear.outputs[0] &&
        k_norm.inputs[0] == linear.outputs[1] && read_once(linear.outputs[0]) && read_once(linear.outputs[1]) &&
        net.weights[static_cast<size_t>(linear.weights[2])].dims[0] % q_norm.attrs.head_dim == 0;
  }
  return steps;
}

ResidualStepNodes residual_step_nodes(const Network& net, const Step& step) {
  const auto at = [&](size_t i) { return i < step.nodes.size() ? &net.nodes[step.nodes[i]] : nullptr; };
  if (step.kind == Step::kAddNorm) return {nullptr, at(0), at(1)};
  return {at(0), at(1), at(2)};
}

/// The step of `steps` whose first node is n, or null.
const Step* step_starting_at(const std::vector<Step>& steps, size_t n) {
  for (const Step& step : steps) {
    if (step.nodes.front() == n) return &step;
  }
  return nullptr;
}

}  // namespace gearbox::internal
