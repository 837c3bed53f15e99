/** @module @deadbolt/conformance */
export { conformanceGroups, defineConformanceSuite, type ConformanceGroup, type SuiteSettings } from './suite.js';
export type { ConformanceHarness, ConformanceOptions, SuiteContext, TestRunner } from './context.js';
export {
  abortedWithin,
  closeLockersAfterEach,
  expectAbortsPastFullPool,
  expectSoon,
  expectWaitsThroughBusyServer,
  expectWaitThroughSlowConnect,
  type SessionBackendAt,
} from './helpers.js';
export { FencedRegister, type FencedWrite } from './register.js';
export { FaultProxy, type Address } from './fault-proxy.js';
export { ChildHolder, type ChildBackendConfig } from './children.js';
export {
  matrixRestartHook,
  matrixUrl,
  restartMatrixServer,
  restartRefusal,
  retryFor,
  storeAddress,
  viaUrl,
  withCredentials,
  type MatrixServer,
} from './test-matrix.js';
export { migrationSuiteOptions } from './migration.js';
export { backendFromConfig, migratingFromConfigs, type MigratingChildOptions } from './migration-child.js';
