/** @module @deadbolt/core/testing */
// @deadbolt/core/testing: what the conformance suite and the benchmark need that no application
// should: how core checks each option (the suite feeds every rule its hostile values), and the
// backend under a locker (a test reaches the store through it).
export { backendOf, optionRules } from './locker.js';
