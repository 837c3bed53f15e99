// @deadbolt/core/testing: what the conformance suite and the benchmark need that no application
// should: how core checks each option (the suite feeds every rule its hostile values).
export { optionRules } from './locker.js';
