export { abortedWithin, closeLockersAfterEach, defineConformanceSuite, type ConformanceHarness, type ConformanceOptions } from './suite.js';
export { FencedRegister } from './register.js';
export { ChildHolder, type ChildBackendConfig } from './children.js';
export { matrixUrl, restartMatrixServer, type MatrixServer } from './test-matrix.js';
