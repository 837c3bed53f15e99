// `deadbolt check`: the shared conformance suite against the user's own store, in a namespace of
// the check's own (a key prefix, tables, a root node or a keyspace named deadbolt-check-<id>),
// which is removed afterwards whatever happened. Vitest runs the suite (check-suite.ts), as in
// this repository's own tests; this file starts it, prints each behaviour as it ends, then the
// table, and cleans up.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocker } from '@deadbolt/core';
import { describeError } from './exit.js';
import { backendFor, storeOf } from './stores.js';

export interface CheckRequest {
  readonly url: string;
  /** Behaviour numbers to run (`1`, `12a`, …); all when absent. */
  readonly only?: readonly string[];
}

/** One behaviour's outcome. */
export interface CheckRow {
  readonly behaviour: string;
  readonly result: 'pass' | 'fail' | 'n/a';
  /** Why it failed (the first line of its error), or why it does not apply. */
  readonly detail?: string;
  readonly ms: number;
}

/** What a check found. */
export interface CheckReport {
  readonly rows: CheckRow[];
  /** What was removed afterwards (or why it could not be). */
  readonly cleanup: string;
  readonly passed: boolean;
  /** The signal that stopped the run early (SIGINT, SIGTERM); the namespace was removed all the same. */
  readonly interrupted?: NodeJS.Signals;
}

/**
 * Runs the suite against `req.url`'s store; resolves the report (printed as it goes to stderr,
 * the table to stdout). @throws InvalidArgumentError for a bad URL (before any I/O);
 * BackendUnavailableError when the store cannot be reached (before the suite starts).
 */
export async function check(req: CheckRequest): Promise<CheckReport> {
  const store = storeOf(req.url);
  const id = randomBytes(4).toString('hex');
  const url = store.scratch.url(req.url, id);
  let rows: CheckRow[] = [];
  let cleanup: string;
  let reached = false;
  // Ctrl-C (or a TERM) stops the suite and still removes the namespace; a second one leaves at once.
  const run: { interrupted?: NodeJS.Signals; cancel?: () => void; onSignal?: (signal: NodeJS.Signals) => void } = {};
  const onSignal = (signal: NodeJS.Signals) => {
    if (run.interrupted) {
      process.stderr.write(`deadbolt: interrupted again: leaving the check's namespace (id ${id}) behind\n`);
      process.exit(128 + (constants.signals[signal] ?? 0));
    }
    run.interrupted = signal;
    process.stderr.write(`deadbolt: ${signal}: stopping the suite (after the behaviour under way), then removing the check's namespace\n`);
    run.cancel?.();
  };
  run.onSignal = onSignal;
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    // Reachable, and the options work, before vitest starts: a dead store is one line, not 100 failures.
    const locker = createLocker(await backendFor(url), { ttlMs: 5000 });
    try {
      const probe = await locker.lock(`deadbolt-check/${id}/probe`, { timeoutMs: 30_000 });
      reached = true;
      await probe.release();
    } finally {
      await locker.close().catch(() => undefined);
    }
    if (!run.interrupted) rows = await runSuite(url, req.only, run);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // Whatever happened, even a probe that failed half-way may have written something.
    const backend = await backendFor(url);
    try {
      cleanup = `removed ${await store.scratch.purge(backend, id, url)}`;
    } catch (error) {
      cleanup = `could not remove the check's namespace (id ${id}): ${describeError(error)}`;
      // A store never reached holds nothing of the check's: its own error is the one to report.
      if (reached) process.stderr.write(`deadbolt: ${cleanup}\n`);
    } finally {
      await backend.close().catch(() => undefined);
    }
  }
  return {
    rows,
    cleanup,
    passed: !run.interrupted && rows.length > 0 && rows.every((r) => r.result !== 'fail'),
    ...(run.interrupted ? { interrupted: run.interrupted } : {}),
  };
}

/** Vitest on check-suite.js with `url`; each behaviour's outcome, in the suite's order. */
async function runSuite(
  url: string,
  only: readonly string[] | undefined,
  run: { interrupted?: NodeJS.Signals; cancel?: () => void; onSignal?: (signal: NodeJS.Signals) => void },
): Promise<CheckRow[]> {
  // The suite's own copy of vitest (see @deadbolt/conformance/runner), whatever the install layout.
  const { startVitest } = await import('@deadbolt/conformance/runner');
  // Vitest leaves files under node_modules to Node (and excludes them as tests): the entry it is
  // given lives in a directory of its own and imports the suite, wherever the package is installed.
  const dir = mkdtempSync(join(tmpdir(), 'deadbolt-check-'));
  writeFileSync(join(dir, 'check.test.mjs'), `import ${JSON.stringify(import.meta.resolve('./check-suite.js'))};\n`);
  const rows: CheckRow[] = [];
  const saved = { url: process.env['DEADBOLT_CHECK_URL'], exitCode: process.exitCode };
  process.env['DEADBOLT_CHECK_URL'] = url;
  try {
    const vitest = await startVitest(
      'test',
      [],
      {
        root: dir,
        config: false,
        watch: false,
        include: ['check.test.mjs'],
        exclude: [],
        testTimeout: 60_000,
        hookTimeout: 120_000,
        ...(only ? { testNamePattern: `(^| )(${only.map((n) => n.replace(/\W/g, '')).join('|')})\\. ` } : {}),
        reporters: [
          {
            onInit(vitest) {
              // Vitest's logger exits the process on SIGINT and SIGTERM (a test runner owns its
              // process); here the check does, so that the namespace is removed first.
              for (const signal of ['SIGINT', 'SIGTERM'] as const)
                for (const listener of process.listeners(signal)) if (listener !== run.onSignal) process.off(signal, listener);
              run.cancel = () => void vitest.cancelCurrentRun('keyboard-input');
              if (run.interrupted) run.cancel();
            },
            onTestCaseResult(test) {
              const row = rowOf(test.name, test.result(), test.diagnostic()?.duration ?? 0);
              // Left out by --only (a behaviour listed n/a is reported skipped whatever the filter).
              if (!row || (only && !only.includes(/^(\d+[a-z]?)\. /.exec(row.behaviour)?.[1] ?? ''))) return;
              rows.push(row);
              const mark = row.result === 'pass' ? 'ok  ' : row.result === 'fail' ? 'FAIL' : 'n/a ';
              process.stderr.write(`${mark} ${row.behaviour}${row.result === 'fail' ? `: ${row.detail}` : ''}\n`);
            },
          },
        ],
      },
      { logLevel: 'error' },
    );
    await vitest.close();
  } finally {
    process.exitCode = saved.exitCode;
    if (saved.url === undefined) delete process.env['DEADBOLT_CHECK_URL'];
    else process.env['DEADBOLT_CHECK_URL'] = saved.url;
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}

/** A test's row; undefined for one skipped for no reason of its own (left out by --only). */
function rowOf(name: string, result: { state: string; errors?: readonly { message?: string }[] }, ms: number): CheckRow | undefined {
  const na = /^(.*) \[n\/a: (.*)\]$/.exec(name);
  if (na) return { behaviour: na[1]!, result: 'n/a', detail: na[2]!, ms: 0 };
  if (result.state === 'failed') {
    const message = result.errors?.[0]?.message ?? 'failed';
    return { behaviour: name, result: 'fail', detail: message.split('\n')[0]!, ms };
  }
  return result.state === 'passed' ? { behaviour: name, result: 'pass', ms } : undefined;
}

/** The report as a Markdown table and the cleanup line. */
export function asTable(report: CheckReport): string {
  const lines = ['| behaviour | result |', '|---|---|'];
  for (const r of report.rows)
    lines.push(
      `| ${r.behaviour.replace(/\|/g, '\\|')} | ${r.result === 'pass' ? 'pass' : r.result === 'fail' ? `**FAIL**: ${r.detail}` : `n/a (${r.detail})`} |`,
    );
  const counts = (result: CheckRow['result']) => report.rows.filter((r) => r.result === result).length;
  const stopped = report.interrupted ? `Stopped by ${report.interrupted}: the rest did not run. ` : '';
  lines.push('', `${stopped}${counts('pass')} passed, ${counts('fail')} failed, ${counts('n/a')} not applicable here. ${report.cleanup}.`);
  return lines.join('\n');
}
