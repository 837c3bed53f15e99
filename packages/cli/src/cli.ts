// The `deadbolt` command: parses the command line (node:util's parseArgs), runs the command, and
// turns every failure into one line on stderr and an exit code (exit.ts), never a stack trace.
import { createRequire } from 'node:module';
import { constants, hostname } from 'node:os';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { rules } from '@deadbolt/core/backend';
import { CliError, describeError, EXIT, exitCodeOf } from './exit.js';
import { asJson, asText, inspect } from './inspect.js';
import { asTable, check } from './check.js';
import { bench, benchTable } from './bench.js';
import { release } from './release.js';
import { run, type RunRequest } from './run.js';
import { elect, leader, leaderJson, leaderText, observe } from './elect.js';
import { STORES } from './stores.js';

const SCHEMES = Object.keys(STORES).join(', ');

/** This package's version (its package.json, one directory above the built files). */
const VERSION = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

const HELP = {
  main: `Usage: deadbolt <command> [options]

Commands:
  run KEY [options] -- COMMAND [ARGS...]   run a command while holding a lock
  inspect KEY [options]                    show who holds a key and who waits
  release KEY --force [options]            free a lock someone else holds (a stuck holder)
  elect NAME [options] -- COMMAND [ARGS...] run a command while this process leads election NAME
  leader NAME [options]                    show who leads election NAME
  observe NAME [options]                   print each change of election NAME's leader
  check [URL]                              run the conformance suite against your store
  bench [URL...]                           time locking on one or more stores, side by side
  -V, --version                            print the version

The store is a URL (--url, or DEADBOLT_URL): ${SCHEMES}; a query sets the
backend's options, e.g. postgres://user@host/db?mode=session, cassandra://host/ks?algorithm=lwt.
"deadbolt <command> --help" shows a command's options.

Exit codes: the command's own (run); 1 a behaviour failed (check); 64 bad usage; 69 store unavailable; 70 store error;
75 key busy or wait over (-E sets another); 76 lock lost while the command ran; 127 command not found.
`,
  elect: `Usage: deadbolt elect NAME [options] -- COMMAND [ARGS...]
       deadbolt elect NAME [options] -c 'SHELL COMMAND'

Campaigns in election NAME (candidates wait in line), and once elected runs COMMAND while this
process leads, publishing --value as the leader's value in the store's fence. As "deadbolt run"
does with a lock: COMMAND's environment has DEADBOLT_KEY (NAME), DEADBOLT_TOKEN (the term's fencing
token) and DEADBOLT_TERM (the term's number); signals are passed on to its process group; if the
term is lost, the group gets SIGTERM, then SIGKILL after --grace. When COMMAND ends, deadbolt
resigns (the next candidate is elected at once) and exits with its code. The term is the lock NAME.

Options:
  -u, --url URL                 the store (default: $DEADBOLT_URL); not redlock://
  -v, --value TEXT              the value to publish (default: this host's name and process id)
      --again                   after a lost term, campaign again and run COMMAND again
  -n, --nonblock                one attempt: exit 75 (or -E) at once if someone leads
  -w, --wait, --timeout SECS    give up campaigning after SECS: exit 75 (or -E)
  -E, --conflict-exit-code N    exit code for -n and -w (default 75)
  -t, --ttl SECS                the term's lease (default 15): how long a crashed leader leads on
  -g, --grace SECS              time between SIGTERM and SIGKILL after a loss (default 10)
  -c, --command STRING          run STRING with /bin/sh -c
  -h, --help                    this help

Exit: COMMAND's code; 75 not elected (-n, -w); 76 the term was lost (without --again).
`,
  leader: `Usage: deadbolt leader NAME [options]

Shows who leads election NAME: the value it published, its term and fencing token, and for how
long (by the leader's clock and this one's). Reads only.

Options:
  -u, --url URL      the store (default: $DEADBOLT_URL)
      --json         JSON (null when nobody leads; tokens as decimal strings)
  -h, --help         this help
`,
  observe: `Usage: deadbolt observe NAME [options]

Prints the leader of election NAME, then one line at each change (a new term, a new value, nobody
leading), until interrupted. A term too short to be seen between two reads is counted ("missed 2
terms"), never skipped silently.

Options:
  -u, --url URL          the store (default: $DEADBOLT_URL)
      --interval SECS    how often the store is read (default 1)
      --json             one JSON object per line: { leader, missedTerms }
  -h, --help             this help

Exit: 128 + n when stopped by signal n.
`,
  run: `Usage: deadbolt run KEY [options] -- COMMAND [ARGS...]
       deadbolt run KEY [options] -c 'SHELL COMMAND'

Takes the lock KEY, runs COMMAND while holding it, releases it when COMMAND and every process it
started have ended (they share a process group of their own), and exits with COMMAND's code (128 +
the signal's number if a signal ended it). COMMAND's environment has DEADBOLT_KEY, DEADBOLT_TOKEN
(the fencing token: pass it to whatever checks it) and DEADBOLT_OWNER. Signals sent to deadbolt are
passed on to the whole group. If the lock is lost, the group gets SIGTERM, then SIGKILL after
--grace, and deadbolt exits 76 once it is gone. A process that leaves the group (setsid) is not
stopped.

Options:
  -u, --url URL                 the store (default: $DEADBOLT_URL)
  -n, --nonblock                one attempt: exit 75 (or -E) at once if KEY is held
  -w, --wait, --timeout SECS    give up after SECS (fractions allowed): exit 75 (or -E)
  -E, --conflict-exit-code N    exit code for -n and -w (default 75)
  -x, --exclusive               the lock KEY, exclusive: the default, as in flock
      --read                    a read lock of the read-write lock KEY (readers share it)
      --write                   the write lock of the read-write lock KEY (beside --read readers)
  -l, --limit N                 a permit of the semaphore KEY with N permits
  -t, --ttl SECS                the lease (default 15): renewed while COMMAND runs; a crashed
                                deadbolt's lock frees itself after it
  -g, --grace SECS              time between SIGTERM and SIGKILL after a loss (default 10)
  -c, --command STRING          run STRING with /bin/sh -c
      --verbose                 say on stderr how long taking the lock took, and its token
  -h, --help                    this help

Plain "run KEY" and -x take the lock KEY (locker.lock); --read, --write and -l take from the
read-write lock or semaphore KEY, a namespace apart from it. There is no -s: the lock KEY has no
shared form, and a flock-style -s reader would not exclude a plain "run KEY" writer.
`,
  inspect: `Usage: deadbolt inspect KEY [options]

Shows who holds KEY (owner, fencing token, time left on the store's clock) and who waits, in
queue order where the store keeps a queue. Reads only: takes, extends and frees nothing.

Options:
  -u, --url URL      the store (default: $DEADBOLT_URL)
  -s, --shared       the read-write lock or semaphore KEY (their namespace, apart from locks)
      --json         JSON (tokens as decimal strings)
      --timeout SECS how long the store may take to answer, connecting included (default 10):
                     exit 69 after
  -h, --help         this help
`,
  release: `Usage: deadbolt release KEY --force [options]

Frees the lock KEY that another process holds: for a holder that is stuck (a hung job keeps its
lease renewed). The store checks the owner itself: if another holder took KEY meanwhile, nothing of
theirs is freed. The freed holder keeps running until its next renewal tells it (its lock's signal
aborts; a "deadbolt run" stops its command): only fencing tokens protect what it writes until then.
Asks for confirmation on a terminal; --yes confirms in a script.

Options:
  -u, --url URL      the store (default: $DEADBOLT_URL)
      --force        required: this frees someone else's lock
  -y, --yes          do not ask
      --owner ID     free this holder only (from "deadbolt inspect"); default: the one holder
  -s, --shared       a permit or read/write lock of the semaphore or read-write lock KEY
      --timeout SECS how long the store may take to answer each request, connecting included
                     (default 10): exit 69 after
  -h, --help         this help

Exit: 0 freed; 1 nothing of that owner's to free; 64 not confirmed, or a store that cannot free
another client's lock (MySQL's and PostgreSQL's session modes: end the holder's server session).
`,
  check: `Usage: deadbolt check [URL] [options]

Runs deadbolt's conformance suite against the store at URL (or --url, or $DEADBOLT_URL): the
behaviours that are safe on a live deployment, each printed on stderr as it ends, then a table on
stdout. Everything it writes goes to a namespace of its own, never the locks of yours: a key
prefix (Redis, etcd), tables (MySQL, PostgreSQL), a root node (ZooKeeper) or a keyspace
(Cassandra) named deadbolt-check-<id> / deadbolt_check_<id>, removed at the end. It needs the
rights a backend uses to make its tables or keyspace where it does. Behaviours that would restart
servers, kill connections or delete claims behind a holder are listed as not applicable. It takes
minutes (the suite waits out real leases; about 2 on Redis, more on polling stores).

Options:
  -u, --url URL      the store (default: $DEADBOLT_URL)
      --only LIST    only these behaviours, by number: --only 1,2,12a
      --json         the table as JSON
  -h, --help         this help

Ctrl-C stops it after the behaviour under way and still removes the namespace (a second Ctrl-C
leaves at once, and leaves the namespace).

Exit: 0 every behaviour that applies passed; 1 one failed; 69 the store cannot be reached;
128 + n stopped by signal n.
`,
  bench: `Usage: deadbolt bench [URL...] [options]

Times locking on each store (the URLs, or --url, or $DEADBOLT_URL), one after another: one client
taking and releasing one key (cycles per second, cycle time), then --clients clients, each with its
own connection, contending for one key with --hold ms holds (holds per second, how long each
waited). Progress on stderr, a table on stdout. Keys are deadbolt-bench/…; every lock is released.

Options:
  -u, --url URL        a store (default: $DEADBOLT_URL), besides the URLs given
      --seconds SECS   how long each workload runs on each store (default 5)
      --clients N      contending clients (default 8)
      --hold MS        how long a contended hold lasts (default 1)
      --json           the numbers as JSON
  -h, --help           this help

Exit: 0; 1 if a store let two clients hold the key at once; 69 a store cannot be reached.
`,
};

const URL_OPTION = { url: { type: 'string', short: 'u' }, help: { type: 'boolean', short: 'h' } } as const;
/** The flags of a command run under a hold (`run`'s lock, `elect`'s term): the wait, the lease, the command. */
const HOLD_OPTIONS = {
  ...URL_OPTION,
  nonblock: { type: 'boolean', short: 'n' },
  wait: { type: 'string', short: 'w' },
  timeout: { type: 'string' },
  'conflict-exit-code': { type: 'string', short: 'E' },
  ttl: { type: 'string', short: 't' },
  grace: { type: 'string', short: 'g' },
  command: { type: 'string', short: 'c' },
} as const satisfies ParseArgsConfig['options'];
const RUN_OPTIONS = {
  ...HOLD_OPTIONS,
  // Parsed only to be refused with the reason (a flock user's -s would not exclude "run KEY").
  shared: { type: 'boolean', short: 's' },
  exclusive: { type: 'boolean', short: 'x' },
  read: { type: 'boolean' },
  write: { type: 'boolean' },
  limit: { type: 'string', short: 'l' },
  verbose: { type: 'boolean' },
} as const satisfies ParseArgsConfig['options'];
const CHECK_OPTIONS = {
  ...URL_OPTION,
  only: { type: 'string' },
  json: { type: 'boolean' },
} as const satisfies ParseArgsConfig['options'];
const RELEASE_OPTIONS = {
  ...URL_OPTION,
  force: { type: 'boolean' },
  yes: { type: 'boolean', short: 'y' },
  owner: { type: 'string' },
  shared: { type: 'boolean', short: 's' },
  timeout: { type: 'string' },
} as const satisfies ParseArgsConfig['options'];
const BENCH_OPTIONS = {
  ...URL_OPTION,
  seconds: { type: 'string' },
  clients: { type: 'string' },
  hold: { type: 'string' },
  json: { type: 'boolean' },
} as const satisfies ParseArgsConfig['options'];
const ELECT_OPTIONS = {
  ...HOLD_OPTIONS,
  value: { type: 'string', short: 'v' },
  again: { type: 'boolean' },
} as const satisfies ParseArgsConfig['options'];
const LEADER_OPTIONS = { ...URL_OPTION, json: { type: 'boolean' } } as const satisfies ParseArgsConfig['options'];
const OBSERVE_OPTIONS = { ...LEADER_OPTIONS, interval: { type: 'string' } } as const satisfies ParseArgsConfig['options'];
const INSPECT_OPTIONS = {
  ...URL_OPTION,
  shared: { type: 'boolean', short: 's' },
  json: { type: 'boolean' },
  timeout: { type: 'string' },
} as const satisfies ParseArgsConfig['options'];

/**
 * Runs the command line `argv` (without node and the script), writing to this process's stdout and
 * stderr; resolves the exit code (see `EXIT`). Never rejects: a failure is one line on stderr and
 * its code. `run` passes signals this process receives on to the command while it runs.
 */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    const [command, ...rest] = argv;
    if (command === undefined || command === '-h' || command === '--help' || command === 'help') {
      process.stdout.write(HELP.main);
      return command === undefined ? EXIT.usage : 0;
    }
    if (command === '-V' || command === '--version' || command === 'version') {
      process.stdout.write(`deadbolt ${VERSION}\n`);
      return 0;
    }
    if (command === 'run') return await runCommand(rest);
    if (command === 'inspect') return await inspectCommand(rest);
    if (command === 'release') return await releaseCommand(rest);
    if (command === 'check') return await checkCommand(rest);
    if (command === 'bench') return await benchCommand(rest);
    if (command === 'elect') return await electCommand(rest);
    if (command === 'leader') return await leaderCommand(rest);
    if (command === 'observe') return await observeCommand(rest);
    throw usage(`unknown command "${command}" (run, inspect, release, check, bench, elect, leader, observe; deadbolt --help)`);
  } catch (error) {
    process.stderr.write(`deadbolt: ${describeError(error)}\n`);
    return exitCodeOf(error);
  }
}

async function runCommand(argv: readonly string[]): Promise<number> {
  const split = argv.indexOf('--');
  const ours = split < 0 ? argv : argv.slice(0, split);
  const { values, positionals } = parse(ours, RUN_OPTIONS, 'run');
  if (values.help) return help('run');
  const [key, ...extra] = positionals;
  if (key === undefined) throw usage('run needs a KEY (deadbolt run --help)');
  if (extra.length > 0) throw usage(`put the command after "--": deadbolt run ${key} -- ${extra.join(' ')}`);
  const command = commandOf(argv, 'run', values.command);
  if (values.shared)
    throw usage(
      'run has no -s: the lock KEY has no shared form, so a -s reader would not exclude a plain "run KEY" writer; use --read and --write (the read-write lock KEY), or -l N (N holders at once)',
    );
  const modes = [values.exclusive && '-x', values.read && '--read', values.write && '--write', values.limit !== undefined && '-l'].filter(
    Boolean,
  );
  if (modes.length > 1) throw usage(`${modes.join(' and ')} exclude each other`);
  const request: RunRequest = {
    ...holdTerms(values, key),
    command,
    kind:
      values.limit !== undefined
        ? { type: 'permit', limit: whole(values.limit, '-l', 1) }
        : { type: values.read ? 'read' : values.write ? 'write' : 'mutex' },
    verbose: values.verbose ?? false,
  };
  return run(request);
}

/** The store, the wait and the lease of a command run under a hold (`HOLD_OPTIONS`), for `key`. @throws CliError for a bad value. */
function holdTerms(values: { [F in keyof typeof HOLD_OPTIONS]?: string | boolean }, key: string) {
  const text = (flag: keyof typeof HOLD_OPTIONS) => values[flag] as string | undefined;
  const wait = text('wait') ?? text('timeout');
  const ttl = text('ttl');
  const conflict = text('conflict-exit-code');
  return {
    url: storeUrl(text('url')),
    key,
    nonblock: values.nonblock === true,
    timeoutMs: wait === undefined ? Infinity : seconds(wait, '-w') * 1000,
    ttlMs: ttl === undefined ? undefined : Math.round(seconds(ttl, '--ttl') * 1000),
    graceMs: seconds(text('grace') ?? '10', '--grace') * 1000,
    conflictCode: conflict === undefined ? EXIT.busy : whole(conflict, '-E', 0, 255),
  };
}

/** The command after `--` or given with `-c`, and the arguments before `--`. @throws CliError for neither or both. */
function commandOf(argv: readonly string[], name: string, inline: string | undefined): string[] {
  const split = argv.indexOf('--');
  const given = split < 0 ? [] : argv.slice(split + 1);
  if (inline !== undefined && given.length > 0) throw usage('give the command with -c or after "--", not both');
  const command = inline !== undefined ? ['/bin/sh', '-c', inline] : given;
  if (command.length === 0) throw usage(`${name} needs a command: deadbolt ${name} KEY -- COMMAND [ARGS...]`);
  return command;
}

async function electCommand(argv: readonly string[]): Promise<number> {
  const split = argv.indexOf('--');
  const { values, positionals } = parse(split < 0 ? argv : argv.slice(0, split), ELECT_OPTIONS, 'elect');
  if (values.help) return help('elect');
  const [name, ...extra] = positionals;
  if (name === undefined) throw usage('elect needs a NAME (deadbolt elect --help)');
  if (extra.length > 0) throw usage(`put the command after "--": deadbolt elect ${name} -- ${extra.join(' ')}`);
  return elect({
    ...holdTerms(values, name),
    value: values.value ?? `${hostname()} pid ${process.pid}`,
    command: commandOf(argv, 'elect', values.command),
    again: values.again ?? false,
  });
}

async function leaderCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, LEADER_OPTIONS, 'leader');
  if (values.help) return help('leader');
  if (positionals.length !== 1) throw usage('leader needs one NAME (deadbolt leader --help)');
  const now = await leader(storeUrl(values.url), positionals[0]!);
  process.stdout.write(`${values.json ? leaderJson(now) : leaderText(positionals[0]!, now)}\n`);
  return 0;
}

async function observeCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, OBSERVE_OPTIONS, 'observe');
  if (values.help) return help('observe');
  if (positionals.length !== 1) throw usage('observe needs one NAME (deadbolt observe --help)');
  const name = positionals[0]!;
  const intervalMs = positiveSeconds(values.interval ?? '1', '--interval') * 1000;
  const stop = new AbortController();
  let stoppedBy: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => ((stoppedBy = signal), stop.abort());
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const signal of signals) process.once(signal, onSignal);
  try {
    await observe(storeUrl(values.url), name, intervalMs, stop.signal, ({ leader: now, missedTerms }) => {
      const missed = missedTerms > 0 ? ` (missed ${missedTerms} term${missedTerms === 1 ? '' : 's'})` : '';
      process.stdout.write(
        values.json ? `{"leader":${leaderJson(now)},"missedTerms":${missedTerms}}\n` : `${leaderText(name, now)}${missed}\n`,
      );
    });
  } finally {
    for (const signal of signals) process.off(signal, onSignal);
  }
  return stoppedBy ? 128 + (constants.signals[stoppedBy] ?? 0) : 0;
}

async function inspectCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, INSPECT_OPTIONS, 'inspect');
  if (values.help) return help('inspect');
  if (positionals.length !== 1) throw usage('inspect needs one KEY (deadbolt inspect --help)');
  const seen = await inspect({
    url: storeUrl(values.url),
    key: positionals[0]!,
    shared: values.shared ?? false,
    timeoutMs: answerTimeoutMs(values.timeout),
  });
  process.stdout.write(`${values.json ? asJson(seen) : asText(seen)}\n`);
  return 0;
}

async function releaseCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, RELEASE_OPTIONS, 'release');
  if (values.help) return help('release');
  if (positionals.length !== 1) throw usage('release needs one KEY (deadbolt release --help)');
  if (!values.force) throw usage(`release frees a lock another process holds: add --force (deadbolt release ${positionals[0]} --force)`);
  return release({
    url: storeUrl(values.url),
    key: positionals[0]!,
    shared: values.shared ?? false,
    owner: values.owner,
    yes: values.yes ?? false,
    timeoutMs: answerTimeoutMs(values.timeout),
  });
}

async function checkCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, CHECK_OPTIONS, 'check');
  if (values.help) return help('check');
  if (positionals.length > 1) throw usage('check takes one URL (deadbolt check --help)');
  if (positionals.length === 1 && values.url !== undefined) throw usage('give the URL once: as an argument or with --url');
  const only = values.only?.split(',').map((n) => n.trim());
  if (only?.some((n) => !/^\d+[a-z]?$/.test(n))) throw usage(`--only takes behaviour numbers such as 1,2,12a, got "${values.only}"`);
  const report = await check({ url: storeUrl(positionals[0] ?? values.url), ...(only ? { only } : {}) });
  process.stdout.write(`${values.json ? JSON.stringify(report, null, 2) : asTable(report)}\n`);
  if (report.rows.length === 0 && !report.interrupted) {
    const why = only ? `--only ${values.only} names no behaviour of the suite` : 'the test runner found none of the suite';
    process.stderr.write(`deadbolt: no behaviour ran: ${why}\n`);
  }
  if (report.interrupted) return 128 + (constants.signals[report.interrupted] ?? 0);
  return report.passed ? 0 : EXIT.failed;
}

async function benchCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, BENCH_OPTIONS, 'bench');
  if (values.help) return help('bench');
  const urls = [...positionals, ...(values.url === undefined ? [] : [values.url])];
  if (urls.length === 0) urls.push(storeUrl(undefined));
  const request = {
    urls,
    seconds: positiveSeconds(values.seconds ?? '5', '--seconds'),
    clients: whole(values.clients ?? '8', '--clients', 1, 1000),
    holdMs: whole(values.hold ?? '1', '--hold', 0, 60_000),
  };
  const rows = await bench(request, (line) => process.stderr.write(`${line}\n`));
  process.stdout.write(`${values.json ? JSON.stringify(rows, null, 2) : benchTable(rows, request)}\n`);
  const broken = rows.filter((r) => r.contended.mostAtOnce > 1);
  for (const r of broken) process.stderr.write(`deadbolt: ${r.store} let ${r.contended.mostAtOnce} clients hold one key at once\n`);
  return broken.length > 0 ? EXIT.failed : 0;
}

function parse<O extends NonNullable<ParseArgsConfig['options']>>(args: readonly string[], options: O, command: string) {
  try {
    return parseArgs({ args: [...args], options, allowPositionals: true, strict: true });
  } catch (error) {
    // A misspelt long flag: named, with the flag it probably meant, as options are everywhere.
    const unknown = /^Unknown option '--([^'=]+)'/.exec((error as Error).message)?.[1];
    if (unknown !== undefined)
      throw usage(
        `${rules.unknownOption(
          `--${unknown}`,
          Object.keys(options).map((name) => `--${name}`),
          `deadbolt ${command}`,
        )} (deadbolt ${command} --help)`,
      );
    throw usage(`${(error as Error).message.replace(/\s*To specify .*$/s, '')} (deadbolt ${command} --help)`);
  }
}

function help(command: keyof typeof HELP): number {
  process.stdout.write(HELP[command]);
  return 0;
}

function usage(message: string): CliError {
  return new CliError(message, EXIT.usage);
}

function storeUrl(flag: string | undefined): string {
  const url = flag ?? process.env['DEADBOLT_URL'];
  if (!url) throw usage(`no store: give --url or set DEADBOLT_URL (${SCHEMES})`);
  return url;
}

function seconds(text: string, flag: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < 0) throw usage(`${flag} takes seconds (a number ≥ 0), got "${text}"`);
  return value;
}

function positiveSeconds(text: string, flag: string): number {
  const value = seconds(text, flag);
  if (value === 0) throw usage(`${flag} must be more than 0`);
  return value;
}

/**
 * How long inspect and release give the store to answer a request (`--timeout`). A command starts
 * a process and connects first, and that first request carries the connect (on Cassandra, the
 * schema check too), so the default is longer than a long-lived locker's four seconds.
 */
function answerTimeoutMs(flag: string | undefined): number {
  return positiveSeconds(flag ?? '10', '--timeout') * 1000;
}

function whole(text: string, flag: string, least: number, most = Number.MAX_SAFE_INTEGER): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || value < least || value > most)
    throw usage(`${flag} takes a whole number from ${least} to ${most}, got "${text}"`);
  return value;
}
