#include "torch_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <iterator>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeplan/common/status_macros.h"
#include "pipeplan/worker/package/checkpoint.h"

namespace pipeplan::worker {
namespace {

const std::map<std::string, torch::ScalarType>& DTypes() {
  static const auto* kTypes = new std::map<std::string, torch::ScalarType>{
      {"float32", torch::kFloat32},   {"float64", torch::kFloat64}, {"float16", torch::kFloat16},
      {"bfloat16", torch::kBFloat16}, {"int64", torch::kInt64},     {"int32", torch::kInt32},
      {"int16", torch::kInt16},       {"int8", torch::kInt8},       {"uint8", torch::kUInt8},
      {"bool", torch::kBool}};
  return *kTypes;
}

// `shape` without dimension `dim`: the shape of one row.
std::vector<int64_t> RowShape(const std::vector<int64_t>& shape, int64_t dim) {
  std::vector<int64_t> row;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<int64_t>(i) != dim) row.push_back(shape[i]);
  }
  return row;
}

std::vector<int64_t> WithRows(std::vector<int64_t> shape, int64_t dim, int64_t rows) {
  if (dim < static_cast<int64_t>(shape.size())) shape[dim] = rows;
  return shape;
}

// Why targets of row shape `row` and type `type` do not fit `loss` on the
// package's output, or "" (pipeplan_loss.check_targets).
std::string TargetProblem(const std::string& loss, const std::vector<int64_t>& output_row,
                          const std::vector<int64_t>& row, torch::ScalarType type) {
  if (loss == "cross_entropy") {
    if (c10::isFloatingType(type) || type == torch::kBool) {
      return absl::StrCat("cross_entropy needs integer class targets, got ", DTypeName(type));
    }
    std::vector<int64_t> want(output_row.begin(), output_row.end() - (output_row.empty() ? 0 : 1));
    if (row != want) {
      return absl::StrCat("cross_entropy on outputs of row shape ", ShapeString(output_row),
                          " needs targets of row shape ", ShapeString(want), ", got ",
                          ShapeString(row));
    }
    return "";
  }
  if (!c10::isFloatingType(type)) {
    return absl::StrCat("mse needs floating-point targets, got ", DTypeName(type));
  }
  if (row != output_row) {
    return absl::StrCat("mse needs targets of the output's row shape ", ShapeString(output_row),
                        ", got ", ShapeString(row));
  }
  return "";
}

absl::StatusOr<torch::IValue> LoadPickle(const std::string& path, const std::string& where) {
  absl::StatusOr<std::vector<char>> bytes = ReadFileBytes(path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(), absl::StrCat(where, ": cannot read the file (",
                                                            bytes.status().message(), ")"));
  }
  try {
    return torch::jit::pickle_load(*bytes);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": not a torch.save'd file LibTorch can read (", e.what_without_backtrace(),
        "); LibTorch 1.13 also cannot read a dict of one entry or a list of one item: save "
        "{\"inputs\": T, \"targets\": T}"));
  }
}

// One tensor, or a list/tuple of tensors.
absl::StatusOr<std::vector<torch::Tensor>> TensorList(const torch::IValue& v,
                                                      const std::string& where) {
  if (v.isTensor()) return std::vector<torch::Tensor>{v.toTensor()};
  std::vector<torch::IValue> items;
  if (v.isList()) {
    for (const torch::IValue& x : v.toListRef()) items.push_back(x);
  } else if (v.isTuple()) {
    items = v.toTupleRef().elements().vec();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " must be a tensor or a list of tensors"));
  }
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "[", i, "] is not a tensor"));
    }
    out.push_back(items[i].toTensor());
  }
  return out;
}

struct FileData {
  std::vector<torch::Tensor> inputs;
  std::optional<torch::Tensor> targets;
};

absl::StatusOr<FileData> ReadTensorsFile(const std::string& path, const std::string& where) {
  PIPEPLAN_ASSIGN_OR_RETURN(torch::IValue v, LoadPickle(path, where));
  FileData data;
  if (!v.isGenericDict()) {
    PIPEPLAN_ASSIGN_OR_RETURN(data.inputs, TensorList(v, where));
    return data;
  }
  const c10::impl::GenericDict dict = v.toGenericDict();
  if (!dict.contains(torch::IValue("inputs"))) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": want a dict with \"inputs\" and \"targets\""));
  }
  PIPEPLAN_ASSIGN_OR_RETURN(data.inputs,
                            TensorList(dict.at(torch::IValue("inputs")), where + ": inputs"));
  if (dict.contains(torch::IValue("targets")) && dict.at(torch::IValue("targets")).isTensor()) {
    data.targets = dict.at(torch::IValue("targets")).toTensor();
  }
  return data;
}

absl::Status CheckFile(const FileData& data, const ModelPackage& package, const std::string& loss,
                       const std::string& where) {
  if (data.inputs.size() != package.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", data.inputs.size(), " inputs, the model takes ", package.inputs.size()));
  }
  const int64_t dim = package.batch_dim;
  std::vector<int64_t> rows;
  for (size_t i = 0; i < data.inputs.size(); ++i) {
    const torch::Tensor& x = data.inputs[i];
    const TensorSpec& want = package.inputs[i];
    const std::vector<int64_t> shape = x.sizes().vec();
    if (x.dim() == 0 || DTypeName(x.scalar_type()) != want.dtype ||
        RowShape(shape, 0) != RowShape(want.shape, dim)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": input \"", want.name, "\" is ", DTypeName(x.scalar_type()), " ",
                       ShapeString(shape), "; the model takes ", want.dtype, " rows of shape ",
                       ShapeString(RowShape(want.shape, dim))));
    }
    rows.push_back(x.size(0));
  }
  if (!data.targets) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": has no \"targets\" tensor; loss ", loss, " needs them"));
  }
  const torch::Tensor& t = *data.targets;
  const std::vector<int64_t> t_shape = t.sizes().vec();
  const std::string problem =
      TargetProblem(loss, RowShape(package.output.shape, dim),
                    t.dim() == 0 ? t_shape : RowShape(t_shape, 0), t.scalar_type());
  if (!problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": targets ", DTypeName(t.scalar_type()),
                                                   " ", ShapeString(t_shape), ": ", problem));
  }
  rows.push_back(t.dim() == 0 ? 0 : t.size(0));
  for (int64_t n : rows) {
    if (n != rows[0] || n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": inputs and targets must have the same number (>0) of rows, got ",
                       absl::StrJoin(rows, ", ")));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<torch::ScalarType> ScalarTypeOf(const std::string& dtype) {
  auto it = DTypes().find(dtype);
  if (it == DTypes().end()) return std::nullopt;
  return it->second;
}

std::string DTypeName(torch::ScalarType type) {
  for (const auto& [name, t] : DTypes()) {
    if (t == type) return name;
  }
  return std::string(c10::toString(type));
}

std::string ShapeString(torch::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<TrainingData> TrainingData::Open(const std::string& spec,
                                                const ModelPackage& package,
                                                const std::string& loss, int64_t batch_size,
                                                int replica, int replicas) {
  if (replicas < 1 || replica < 0 || replica >= replicas || batch_size % replicas != 0) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", replica, " of ", replicas,
                                                   " of a batch of ", batch_size, " rows"));
  }
  TrainingData data;
  data.package_ = &package;
  data.loss_ = loss;
  data.batch_size_ = batch_size;
  data.replica_ = replica;
  data.replicas_ = replicas;
  if (spec.rfind("tensors:", 0) == 0 && spec.size() > 8) {
    const std::string where = absl::StrCat("data ", spec);
    PIPEPLAN_ASSIGN_OR_RETURN(FileData file, ReadTensorsFile(spec.substr(8), where));
    PIPEPLAN_RETURN_IF_ERROR(CheckFile(file, package, loss, where));
    for (const torch::Tensor& x : file.inputs) data.inputs_.push_back(x.contiguous());
    data.targets_ = file.targets->contiguous();
    data.rows_ = data.targets_.size(0);
    return data;
  }
  int64_t seed = 0;
  if (spec.rfind("synthetic:seed=", 0) == 0 && absl::SimpleAtoi(spec.substr(15), &seed)) {
    if (seed < 0 || seed >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data ", spec, ": the seed must be in [0, 2^31)"));
    }
    data.seed_ = seed;
    return data;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("data \"", spec, "\": want tensors:FILE or synthetic:seed=N"));
}

void TrainingData::LoadBatch(int64_t step) {
  if (step == batch_step_) return;
  const int64_t dim = package_->batch_dim;
  batch_inputs_.clear();
  if (seed_) {
    // Same calls, same generator as pipeplan_data.SyntheticData.batch.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(
        static_cast<uint64_t>(*seed_) * (uint64_t{1} << 32) + static_cast<uint64_t>(step));
    for (const TensorSpec& in : package_->inputs) {
      const std::vector<int64_t> shape = WithRows(in.shape, dim, batch_size_);
      const torch::ScalarType type = *ScalarTypeOf(in.dtype);
      torch::Tensor x = IsFloatingDType(in.dtype) ? torch::randn(shape, gen, torch::kFloat32)
                                                  : torch::randint(0, in.high > 0 ? in.high : 2,
                                                                   shape, gen, torch::kInt64);
      batch_inputs_.push_back(x.to(type));
    }
    const std::vector<int64_t> out = WithRows(package_->output.shape, dim, batch_size_);
    if (loss_ == "cross_entropy") {
      batch_targets_ = torch::randint(
          0, out.back(), std::vector<int64_t>(out.begin(), out.end() - 1), gen, torch::kInt64);
    } else {
      batch_targets_ = torch::randn(out, gen, torch::kFloat32);
    }
  } else {
    const torch::Tensor rows = torch::remainder(
        torch::arange(step * batch_size_, (step + 1) * batch_size_, torch::kInt64), rows_);
    for (const torch::Tensor& x : inputs_) {
      torch::Tensor b = x.index_select(0, rows);
      batch_inputs_.push_back(dim == 0 ? b : b.movedim(0, dim));
    }
    batch_targets_ = targets_.index_select(0, rows);
  }
  batch_step_ = step;
}

std::pair<int64_t, int64_t> TrainingData::Rows(int m, int microbatches) const {
  const int64_t slice = batch_size_ / replicas_;
  const int64_t b = slice / microbatches;
  return {replica_ * slice + m * b, b};
}

std::vector<torch::Tensor> TrainingData::Inputs(int64_t step, int m, int microbatches) {
  LoadBatch(step);
  const auto [first, rows] = Rows(m, microbatches);
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& x : batch_inputs_) {
    out.push_back(x.narrow(package_->batch_dim, first, rows));
  }
  return out;
}

torch::Tensor TrainingData::Targets(int64_t step, int m, int microbatches) {
  LoadBatch(step);
  const auto [first, rows] = Rows(m, microbatches);
  return batch_targets_.narrow(0, first, rows);
}

}  // namespace pipeplan::worker
