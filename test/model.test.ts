/**
 * Model-based tests: fast-check generates programs of several clients (model/program.ts says what
 * a program does and what each step is checked against) and runs each on the real store, every
 * store kind and a few migrations; a failing program is shrunk to a minimal one and printed as a
 * regression test, with the seed that found it. The default profile gives each target a few
 * seconds (about 2½ minutes in all); `DEADBOLT_MODEL_PROFILE=long` (`pnpm test:long`) gives each
 * a few minutes. `DEADBOLT_MODEL_SEED` (and `DEADBOLT_MODEL_PATH`) replays a run that failed.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, it } from 'vitest';
import type { StoreKind } from './namespaces.js';
import { asRegression, ModelViolation, programArb, runProgram } from './model/program.js';
import { makeTarget } from './model/targets.js';

const LONG = process.env['DEADBOLT_MODEL_PROFILE'] === 'long';
const SEED = process.env['DEADBOLT_MODEL_SEED'];
const PATH = process.env['DEADBOLT_MODEL_PATH'];

/** Each target and how long it may run, in seconds, in the default profile (the long one: ×10). */
const TARGETS: [StoreKind, StoreKind | undefined, number][] = [
  ['memory', undefined, 8],
  ['redis', undefined, 12],
  ['mysql', undefined, 12],
  ['postgres', undefined, 12],
  ['zookeeper', undefined, 12],
  ['etcd', undefined, 12],
  ['cassandra', undefined, 15],
  ['memory', 'etcd', 10],
  ['postgres', 'redis', 12],
  ['mysql', 'zookeeper', 12],
  ['zookeeper', 'mysql', 12],
  ['redis', 'cassandra', 12],
];

describe('model-based: generated programs against the model of the contract', () => {
  for (const [kind, to, seconds] of TARGETS) {
    const name = to ? `${kind} -> ${to}` : kind;
    const budgetMs = seconds * 1000 * (LONG ? 10 : 1);
    it(
      name,
      async () => {
        const target = await makeTarget(kind, to);
        const started = performance.now();
        try {
          const details = await fc.check(
            fc.asyncProperty(programArb(to !== undefined), (program) =>
              runProgram(target, program, `model/${randomBytes(6).toString('hex')}`),
            ),
            {
              // A time budget, shrinking included, rather than a count: at least a few programs even on a slow day.
              interruptAfterTimeLimit: budgetMs,
              numRuns: 1_000_000,
              ...(SEED ? { seed: Number(SEED) } : {}),
              ...(PATH ? { path: PATH } : {}),
            },
          );
          const took = `${((performance.now() - started) / 1000).toFixed(1)} s`;
          console.log(
            `[model] ${name}: ${details.numRuns} programs${details.interrupted ? ' (time budget reached)' : ''} in ${took}, seed ${details.seed}`,
          );
          if (!details.failed) {
            if (details.numRuns < 3) throw new Error(`only ${details.numRuns} programs ran within ${budgetMs} ms on ${name}`);
            return;
          }
          const program = details.counterexample![0];
          const error = details.errorInstance;
          const what = error instanceof ModelViolation ? error.message : String(error);
          throw new Error(
            [
              `a generated program broke the contract on ${name}: ${what}`,
              `seed ${details.seed}, path ${details.counterexamplePath}, found in ${details.numRuns} programs and shrunk ${details.numShrinks} times, ${Math.round(performance.now() - started)} ms`,
              `replay: DEADBOLT_MODEL_SEED=${details.seed} DEADBOLT_MODEL_PATH=${details.counterexamplePath} pnpm exec vitest run test/model.test.ts -t '${name}'`,
              'as a regression test (test/model-regressions.test.ts):',
              '',
              asRegression(name, program, what.split(':').slice(1).join(':').trim() || what),
            ].join('\n'),
          );
        } finally {
          await target.purge();
        }
      },
      budgetMs + 120_000,
    );
  }
});
