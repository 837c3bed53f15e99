#!/usr/bin/env node
// The `deadbolt` binary (cli.ts does the work).
import { main } from './cli.js';

const code = await main(process.argv.slice(2));
// The store's connections are closed by now; exit at once rather than wait for a driver's timers.
process.exit(code);
