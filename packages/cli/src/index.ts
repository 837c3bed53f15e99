/** @module deadbolt */
// The command line as a library: `main(argv)` is the `deadbolt` binary without the process exit.
export { main } from './cli.js';
export { EXIT } from './exit.js';
export { backendFor } from './stores.js';
