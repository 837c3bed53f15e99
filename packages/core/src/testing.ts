/** @module @deadbolt/core/testing */
// @deadbolt/core/testing: what the conformance suite and the benchmark need that no application
// should: how core checks each option (the suite feeds every rule its hostile values), the backend
// under a locker (a test reaches the store through it), wrappers that watch or change what reaches a
// store, and the hooks through which a backend shows its tests what is not its API.
export { backendOf, optionRules } from './locker.js';
export { TestingHooks } from './testing-hooks.js';
export { observeBackend, wrapBackend, type BackendMethod } from './wrap.js';
