// `deadbolt check`: the shared conformance suite against the user's own store, in a namespace of
// the check's own (a key prefix, tables, a root node or a keyspace named deadbolt-check-<id>),
// which is removed afterwards whatever happened. The suite's own small runner runs it
// (check-suite.ts; no test runner's toolchain to install), the same suite vitest runs in this
// repository's own tests; this file starts it, prints each behaviour as it ends, then the table,
// and cleans up.
import { randomBytes } from 'node:crypto';
import { constants } from 'node:os';
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
  const run: { interrupted?: NodeJS.Signals; cancel?: () => void } = {};
  const onSignal = (signal: NodeJS.Signals) => {
    if (run.interrupted) {
      process.stderr.write(`deadbolt: interrupted again: leaving the check's namespace (id ${id}) behind\n`);
      process.exit(128 + (constants.signals[signal] ?? 0));
    }
    run.interrupted = signal;
    process.stderr.write(
      `deadbolt: ${signal}: stopping the suite (the behaviour under way is abandoned, its locks closed), then removing the check's namespace\n`,
    );
    run.cancel?.();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    // Reachable, and the options work, before the suite starts: a dead store is one line, not 100 failures.
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

/** The suite's own runner on check-suite.js with `url`; each behaviour's outcome, in the suite's order. */
async function runSuite(
  url: string,
  only: readonly string[] | undefined,
  run: { interrupted?: NodeJS.Signals; cancel?: () => void },
): Promise<CheckRow[]> {
  // The suite's own runner (@deadbolt/conformance/runner): no test runner's toolchain to install.
  const { runSuiteFile } = await import('@deadbolt/conformance/runner');
  const rows: CheckRow[] = [];
  const saved = process.env['DEADBOLT_CHECK_URL'];
  process.env['DEADBOLT_CHECK_URL'] = url;
  try {
    const suite = runSuiteFile(import.meta.resolve('./check-suite.js'), {
      testTimeoutMs: 60_000,
      hookTimeoutMs: 120_000,
      ...(only ? { namePattern: new RegExp(`(^| )(${only.map((n) => n.replace(/\W/g, '')).join('|')})\\. `) } : {}),
      onResult(test) {
        const row = rowOf(test.name, test.state, test.error, test.ms);
        // Left out by --only (a behaviour listed n/a is reported skipped whatever the filter).
        if (!row || (only && !only.includes(/^(\d+[a-z]?)\. /.exec(row.behaviour)?.[1] ?? ''))) return;
        rows.push(row);
        const mark = row.result === 'pass' ? 'ok  ' : row.result === 'fail' ? 'FAIL' : 'n/a ';
        process.stderr.write(`${mark} ${row.behaviour}${row.result === 'fail' ? `: ${row.detail}` : ''}\n`);
      },
    });
    run.cancel = () => suite.cancel();
    if (run.interrupted) suite.cancel();
    await suite.done;
  } finally {
    if (saved === undefined) delete process.env['DEADBOLT_CHECK_URL'];
    else process.env['DEADBOLT_CHECK_URL'] = saved;
  }
  return rows;
}

/** A test's row; undefined for one skipped for no reason of its own. */
function rowOf(name: string, state: string, error: unknown, ms: number): CheckRow | undefined {
  const na = /^(.*) \[n\/a: (.*)\]$/.exec(name);
  if (na) return { behaviour: na[1]!, result: 'n/a', detail: na[2]!, ms: 0 };
  if (state === 'failed') {
    const message = error instanceof Error ? error.message : String(error ?? 'failed');
    return { behaviour: name, result: 'fail', detail: message.split('\n')[0]!, ms };
  }
  return state === 'passed' ? { behaviour: name, result: 'pass', ms } : undefined;
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
