/** @module @deadbolt/conformance/history */
// @deadbolt/conformance/history: the history recorder and checker, and the workload that feeds
// them, without the test runner (a cluster run or a CLI imports this).
export {
  checkHistory,
  HistoryRecorder,
  HistoryWorker,
  monotonicMs,
  type CheckOptions,
  type HistoryCheck,
  type HistoryEvent,
  type HistoryOp,
  type HistoryType,
  type Hold,
  type KeyModel,
} from './history.js';
export { runWorker, type Resource, type WorkerOptions } from './workload.js';
