// Checks a job's TrainingSpec at CreateJob, before anything is solved or
// stored, so a bad spec is a field-level INVALID_ARGUMENT at `jobs create`
// rather than a worker failure later. What only a worker can check (the
// package's files, the data's shapes) is checked there and reported through
// FinishWorker.
#ifndef PIPEPLAN_SERVER_RPC_TRAINING_SPEC_H_
#define PIPEPLAN_SERVER_RPC_TRAINING_SPEC_H_

#include "absl/status/status.h"
#include "pipeplan/v1/planner_service.pb.h"

namespace pipeplan::server {

// INVALID_ARGUMENT naming the field (`training.optimizer`, ...) when `spec`
// is not trainable. With a valid spec the request plans for its batch:
// options.global_batch is set to training.batch_size (INVALID_ARGUMENT when
// the request already asks for another global batch, or for a microbatch
// count that does not divide it), and the memory and time model are the
// training's (PlanForTheTraining). An empty spec (planning-only job) is OK and
// leaves `request` alone.
absl::Status ApplyTrainingSpec(const v1::TrainingSpec& spec, v1::PlanRequest* request);

// Sets the options' optimizer and precision to what the torch executor runs
// for `spec` (a checked spec): sgd (momentum when training.momentum > 0) or
// adam for adam/adamw; fp32, or fp64 for training.dtype float64. A request
// that names another optimizer or precision is INVALID_ARGUMENT saying
// what the workers run: the plan must count the memory that runs. Also for
// a replan's new options. An empty spec leaves `options` alone.
absl::Status PlanForTheTraining(const v1::TrainingSpec& spec, v1::PlanOptions* options);

}  // namespace pipeplan::server

#endif  // PIPEPLAN_SERVER_RPC_TRAINING_SPEC_H_
