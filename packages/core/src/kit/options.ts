/**
 * The one place options are read: core's locker and call options and every backend's factory go
 * through `readOptions`, so an option cannot be added without a rule that checks it. A rule reads
 * an own property only (a value inherited from `Object.prototype`, say a polluted `timeoutMs`, is
 * never honoured), checks its type and range, and throws `InvalidArgumentError` naming the option.
 * Each rule also lists values it must refuse (`hostile`), which the conformance suite feeds to every
 * factory and entry point. Long because every rule any backend needs lives here, written once.
 */
import { InvalidArgumentError, keepSecret } from '../api/errors.js';
import { MAX_TIMER_MS } from './time.js';

/** How one option is checked. `T` is what the option holds once read. */
export interface Rule<T> {
  /** Returns the checked value. @throws InvalidArgumentError naming `name`. */
  check(value: unknown, name: string): T;
  /** Values this rule must refuse (the conformance suite's hostile inputs). */
  readonly hostile: readonly unknown[];
  /** The option must be given (`rules.required`): `readOptions` refuses options without it. */
  readonly required?: boolean;
}

/**
 * A rule for every option of `O` (an options interface): declare a backend's rules with
 * `satisfies Rules<MyOptions>`, and an option added to the interface without a rule does not
 * compile.
 */
export type Rules<O> = { readonly [K in keyof O]-?: Rule<unknown> };

/** The value an option's rule returns. */
type Checked<R> = R extends Rule<infer T> ? T : never;
/** The options of `R` whose rules are `rules.required`. */
type RequiredNames<R> = { [K in keyof R]: R[K] extends { readonly required: true } ? K : never }[keyof R];

/** What `readOptions` gives for `rules`: each option as its rule returns it, or absent (never a required one). */
export type ReadOptions<R> = { -readonly [K in Exclude<keyof R, RequiredNames<R>>]?: Checked<R[K]> } & {
  -readonly [K in RequiredNames<R>]: Checked<R[K]>;
};

/**
 * Reads `raw` (undefined meaning no options) by `rules`: own properties only, each checked by its
 * rule; absent and `undefined` ones are left out. `where` names the call in errors, and `parent`,
 * for sub-options (`nested`), goes before each option's name (`poll.minDelayMs`). The result has
 * no prototype: an option left out reads as undefined even when someone has put a property of that
 * name on `Object.prototype` (which every object literal inherits). A name no rule knows is refused,
 * `undefined` or not: a misspelt option (`timeout` for `timeoutMs`) would otherwise leave its
 * default in force without a word, and a lock that waits for ever because of a typo is found late.
 * An option that is another's other name (`alias`) is read as that one; both given is refused.
 * @throws InvalidArgumentError when `raw` is not a plain object, holds an option no rule knows (the
 * message names it, and the option it probably meant where one is close), holds an option under
 * both its names, or any option breaks its rule.
 */
export function readOptions<R extends Record<string, Rule<unknown>>>(
  raw: unknown,
  rules: R,
  where: string,
  parent?: string,
): ReadOptions<R> {
  const out = noPrototype<Record<string, unknown>>();
  if (raw === undefined) raw = noPrototype();
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new InvalidArgumentError(`${where} options must be an object, got ${describe(raw)}`);
  }
  for (const name of Object.keys(raw)) {
    if (!Object.hasOwn(rules, name)) throw new InvalidArgumentError(unknownOption(name, Object.keys(rules), where));
    const of = (rules[name] as Partial<Alias>).aliasOf;
    if (of !== undefined && own(raw, name) !== undefined && own(raw, of) !== undefined)
      throw new InvalidArgumentError(`${where}: \`${name}\` is another name for \`${of}\`: give one of them, not both`);
  }
  for (const name in rules) {
    const value = own(raw, name);
    if (value === undefined) continue;
    out[(rules[name] as Partial<Alias>).aliasOf ?? name] = rules[name]!.check(value, parent === undefined ? name : `${parent}.${name}`);
  }
  for (const name in rules)
    if (rules[name]!.required && out[name] === undefined)
      throw new InvalidArgumentError(`${where}: \`${parent === undefined ? name : `${parent}.${name}`}\` is required`);
  return out as ReadOptions<R>;
}

/**
 * The message for an option `name` that `where` does not take: it names the option (cut to 64
 * characters) and, where one of `known` is close, that one: the same but for case, one that starts
 * with it or with which it starts (`timeout`, `timeoutMs`; `ttl`, `ttlMs`), or one at most two
 * edits away (`tllMs`, `ttlMs`).
 */
export function unknownOption(name: string, known: readonly string[], where: string): string {
  const shown = name.length > 64 ? `${name.slice(0, 64)}…` : name;
  const near = closest(name, known);
  return `${where}: unknown option \`${shown}\`${near === undefined ? '' : `; did you mean \`${near}\`?`}`;
}

/** The one of `known` closest to `name` (see `unknownOption`), if any is close. */
function closest(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase();
  let best: string | undefined;
  let bestScore = Infinity;
  for (const candidate of known) {
    const other = candidate.toLowerCase();
    const prefix =
      lower.length >= 3 && (other.startsWith(lower) || lower.startsWith(other)) ? Math.abs(other.length - lower.length) : Infinity;
    const score = Math.min(lower === other ? 0 : Infinity, prefix, editDistance(lower, other, 2));
    if (score < bestScore) [best, bestScore] = [candidate, score];
  }
  return bestScore <= Math.max(2, Math.min(7, Math.floor(name.length / 2))) ? best : undefined;
}

/** The edit distance of `a` and `b` (insertions, deletions, substitutions), or Infinity once past `limit`. */
function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return Infinity;
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    if (Math.min(...next) > limit) return Infinity;
    row = next;
  }
  return row[b.length]! <= limit ? row[b.length]! : Infinity;
}

/** `rule` for an option that must be given: `readOptions` refuses options without it, and types it as present. */
function required<T>(rule: Rule<T>): Rule<T> & { readonly required: true } {
  return { check: rule.check, hostile: rule.hostile, required: true };
}

/**
 * An empty object without a prototype, for options read or built here: `{}` inherits whatever
 * `Object.prototype` holds, so `{}.timeoutMs` is whatever someone put there.
 */
export function noPrototype<T extends object>(): Partial<T> {
  return Object.create(null) as Partial<T>;
}

/**
 * `raw`'s own enumerable properties in an object without a prototype: how a function reads an
 * options bag it does not check with `readOptions` (internal ones built as object literals, say).
 */
export function ownProps<T extends object>(raw: T | undefined): Partial<T> {
  return Object.assign(noPrototype<T>(), raw);
}

/** `raw[name]` when it is `raw`'s own property, else undefined. */
export function own(raw: object, name: string): unknown {
  return Object.hasOwn(raw, name) ? (raw as Record<string, unknown>)[name] : undefined;
}

/** A short description of a bad value for an error message (never a string's content: it may be a secret). */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (typeof value === 'string') return `a string of ${value.length} characters`;
  if (Array.isArray(value)) return 'an array';
  return `a value of type ${typeof value}`;
}

/** Refuses `value` of option `name`: InvalidArgumentError saying what was `wanted` and what came (never the value itself). */
const refuse = (name: string, wanted: string, value: unknown): never => {
  throw new InvalidArgumentError(`${name} must be ${wanted}, got ${describe(value)}`);
};

/** Numbers every numeric rule refuses, whatever its range. */
const NOT_NUMBERS = [null, '5', true, {}, NaN, 10n];

/** `true` or `false` (the string `'false'` is not false). */
export const flag: Rule<boolean> = {
  check: (value, name) => (typeof value === 'boolean' ? value : refuse(name, 'true or false', value)),
  hostile: ['false', 'true', 1, 0, null, {}],
};

/**
 * A delay or timeout a backend arms a timer with: a number of ms from `min` (default 1) up to
 * Node's timer range (2^31 − 1 ms, about 24.8 days); a longer one would fire at once.
 */
export function ms(min = 1): Rule<number> {
  return {
    check: (value, name) =>
      typeof value === 'number' && Number.isFinite(value) && value >= min && value <= MAX_TIMER_MS
        ? value
        : refuse(name, `a number of ms from ${min} to ${MAX_TIMER_MS}`, value),
    hostile: [...NOT_NUMBERS, Infinity, -Infinity, -1, min - 0.5, 2 ** 31, Number.MAX_SAFE_INTEGER],
  };
}

/** A whole number of ms from `min` up to Node's timer range: for a store that counts whole ms (Redis's `WAIT`, a session timeout). */
function wholeMs(min = 1): Rule<number> {
  return count(min, MAX_TIMER_MS);
}

/** A caller's wait: any number of ms ≥ 0, Infinity meaning no limit (long waits are chained timers). */
export const wait: Rule<number> = {
  check: (value, name) => (typeof value === 'number' && value >= 0 ? value : refuse(name, 'a number ≥ 0 or Infinity', value)),
  hostile: [...NOT_NUMBERS, -1, -Infinity],
};

/** A number (fractions allowed) from `min` up to, but not including, `below`. */
export function share(min: number, below: number): Rule<number> {
  return {
    check: (value, name) =>
      typeof value === 'number' && value >= min && value < below ? value : refuse(name, `a number from ${min} to below ${below}`, value),
    hostile: [...NOT_NUMBERS, Infinity, -Infinity, min - 1, below],
  };
}

/** A plain object of further settings passed on as they are (a driver's own options). */
export const settings: Rule<object> = {
  check: (value, name) => (typeof value === 'object' && value !== null && !Array.isArray(value) ? value : refuse(name, 'an object', value)),
  hostile: [null, 'x', 5, []],
};

/** An object of sub-options, each read by `rules` as `readOptions` reads options. */
export function nested<R extends Record<string, Rule<unknown>>>(rules: R): Rule<ReadOptions<R>> {
  const inner = Object.entries(rules).flatMap(([key, rule]) => rule.hostile.filter((h) => h !== undefined).map((h) => ({ [key]: h })));
  return {
    check: (value, name) => {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return refuse(name, 'an object', value);
      return readOptions(value, rules, name, name);
    },
    hostile: [null, 5, 'x', [], ...inner],
  };
}

/** A whole number from `min` to `max`. */
export function count(min: number, max = Number.MAX_SAFE_INTEGER): Rule<number> {
  return {
    check: (value, name) =>
      Number.isSafeInteger(value) && (value as number) >= min && (value as number) <= max
        ? (value as number)
        : refuse(name, `a whole number from ${min} to ${max}`, value),
    hostile: [...NOT_NUMBERS, Infinity, -Infinity, min - 1, min + 0.5, ...(max < Number.MAX_SAFE_INTEGER ? [max + 1] : [])],
  };
}

/** One of `values`. */
export function oneOf<const V extends string>(values: readonly V[]): Rule<V> {
  return {
    check: (value, name) => (values.includes(value as V) ? (value as V) : refuse(name, values.map((v) => `'${v}'`).join(' or '), value)),
    hostile: ['bogus', null, 5, ''],
  };
}

/**
 * A string matching `pattern`, described as `wanted` in errors. `hostile` adds strings the
 * pattern must refuse. The value is echoed in the error (these are names, not secrets).
 */
export function text(pattern: RegExp, wanted: string, hostile: readonly string[] = []): Rule<string> {
  return {
    check: (value, name) => {
      if (typeof value !== 'string' || !pattern.test(value)) {
        throw new InvalidArgumentError(
          `${name} must be ${wanted}, got ${typeof value === 'string' ? JSON.stringify(value) : describe(value)}`,
        );
      }
      return value;
    },
    hostile: [5, null, {}, true, ...hostile],
  };
}

/** Anything `accepts` says yes to (a driver's client or pool), described as `wanted`. */
export function instance<T>(accepts: (value: unknown) => value is T, wanted: string): Rule<T> {
  return {
    check: (value, name) => (accepts(value) ? value : refuse(name, wanted, value)),
    hostile: [null, 'x', 5, {}, []],
  };
}

/** A rule that reads its option as another's (`aliasOf`): `readOptions` puts the value there. */
interface Alias extends Rule<never> {
  readonly aliasOf: string;
}

/**
 * `alias(of, rule)`: another name for option `of`, checked by `of`'s `rule` and read as `of` (a
 * store's own word beside the name every backend shares, say Redis's `prefix` beside `namespace`).
 * Both given is refused: neither may silently win.
 */
export function alias(of: string, rule: Rule<unknown>): Rule<never> {
  const aliased: Alias = { aliasOf: of, check: rule.check as Alias['check'], hostile: rule.hostile };
  return aliased;
}

/** The options of `rules` that are other names for another (`alias`), each as `[alias, the option it names]`. */
export function aliasesOf(rules: Record<string, Rule<unknown>>): [string, string][] {
  return Object.entries(rules).flatMap(([name, rule]) => {
    const of = (rule as Partial<Alias>).aliasOf;
    return of === undefined ? [] : [[name, of] as [string, string]];
  });
}

/** An `AbortSignal`. */
export const signal: Rule<AbortSignal> = instance((v): v is AbortSignal => v instanceof AbortSignal, 'an AbortSignal');

/**
 * A store URL with one of `schemes` (`redis`, `rediss`…), parsed (`parseStoreUrl`), with every
 * `host[:port]` of a comma-separated host list checked (a port from 1 to 65535); `hostless` also
 * takes one with no host (PostgreSQL's `postgres:///db?host=/socket/dir`). Its password is kept
 * secret (`keepSecret`) and its text never echoed in errors.
 */
export function url(schemes: readonly string[], hostless = false): Rule<StoreUrl> {
  const wanted = `a URL like ${schemes[0]}://host:port`;
  return {
    check: (value, name) => {
      if (typeof value !== 'string') return refuse(name, wanted, value);
      let parsed = parseStoreUrl(value, schemes);
      keepSecret(parsed?.password);
      if (parsed && parsed.hosts.length === 0 && !hostless) parsed = undefined;
      if (!parsed)
        throw new InvalidArgumentError(
          `${name} must be ${wanted}${schemes.length > 1 ? ` (${schemes.join(', ')})` : ''}; the one given is not (its text is not shown: it may hold a password)`,
        );
      return parsed;
    },
    hostile: [
      5,
      null,
      {},
      '',
      'nonsense',
      ...(hostless ? [] : [`${schemes[0]}://`]),
      `${schemes[0]}://[`,
      `${schemes[0]}://127.0.0.1:99999`,
      `${schemes[0]}://127.0.0.1:port`,
      `${schemes[0]}://u:%E0%A4%A@127.0.0.1:1`,
      `ftp://127.0.0.1:1`,
    ],
  };
}

/**
 * The client a backend or fence talks to its store through, chosen once for all of them: yours
 * (`client`, which `end` leaves open) or its own (`open` makes it from `url`, and `end` closes it).
 */
export interface StoreClient<C> {
  readonly client: C;
  /** The URL the client was made from; undefined for a client of yours. */
  readonly url: StoreUrl | undefined;
  /** `LockBackend.address`: the URL's servers, or those a client of yours shows (undefined where it does not). */
  readonly address: string | undefined;
  /** Runs `close` on the client if it is the backend's own; nothing for yours. @throws what `close` throws. */
  end(close: (client: C) => unknown): Promise<void>;
}

/**
 * The client for `options`: exactly one of `url` (then `open(url)` makes the backend's own) and
 * `client` (yours, whose servers `addressOf` reads where the driver shows them). `urlForm` shows
 * the URL's shape in the error. @throws InvalidArgumentError when both or neither is given; what
 * `open` throws for a URL it cannot take.
 */
export function storeClient<C>(
  options: { readonly url?: StoreUrl | undefined; readonly client?: C | undefined },
  where: string,
  urlForm: string,
  open: (url: StoreUrl) => C,
  addressOf?: (client: C) => string | undefined,
): StoreClient<C> {
  const { url, client } = options;
  if (client !== undefined && url === undefined)
    return { client, url: undefined, address: addressOf?.(client), end: async () => undefined };
  if (url !== undefined && client === undefined) {
    const own = open(url);
    return {
      client: own,
      url,
      address: url.address,
      end: async (close) => {
        await close(own);
      },
    };
  }
  throw new InvalidArgumentError(`${where} needs a url (${urlForm}) or a client, not both`);
}

/** A parsed store URL: the text as given (for the driver), its hosts, credentials and path. */
export interface StoreUrl {
  readonly href: string;
  readonly scheme: string;
  readonly hosts: readonly { readonly host: string; readonly port: number | undefined }[];
  readonly username: string | undefined;
  readonly password: string | undefined;
  /** The path without its leading `/` (a database, keyspace or chroot), '' when none. */
  readonly path: string;
  /** Its servers as events name them (`LockBackend.address`): `host:port,…`, without credentials or path. */
  readonly address: string;
}

/**
 * `scheme://[user[:password]@][host[:port][,host[:port]…]][/path][?query]`, or undefined when the
 * text is not that. Hosts are names, IPv4 or bracketed IPv6 addresses; `hosts` is empty when none
 * is given.
 */
export function parseStoreUrl(text: string, schemes: readonly string[]): StoreUrl | undefined {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(?:([^@/?#]*)@)?([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/i.exec(text);
  if (!m || !schemes.includes(m[1]!.toLowerCase())) return undefined;
  const hosts: { host: string; port: number | undefined }[] = [];
  for (const part of m[3] ? m[3].split(',') : []) {
    const h = /^(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::(\d{1,5}))?$/i.exec(part);
    if (!h) return undefined;
    const port = h[2] === undefined ? undefined : Number(h[2]);
    if (port !== undefined && (port < 1 || port > 65_535)) return undefined;
    hosts.push({ host: h[1]!, port });
  }
  let username: string | undefined;
  let password: string | undefined;
  if (m[2] !== undefined) {
    const colon = m[2].indexOf(':');
    try {
      username = decodeURIComponent(colon < 0 ? m[2] : m[2].slice(0, colon)) || undefined;
      password = colon < 0 ? undefined : decodeURIComponent(m[2].slice(colon + 1));
    } catch {
      return undefined; // a malformed %-escape
    }
  }
  const address = hosts.map(({ host, port }) => (port === undefined ? host : `${host}:${port}`)).join(',');
  return { href: text, scheme: m[1]!.toLowerCase(), hosts, username, password, path: (m[4] ?? '').replace(/^\//, ''), address };
}

/**
 * The rules a backend's options are checked by (`readOptions`), one maker per kind of value:
 * `rules.ms()`, `rules.url(['redis'])`, `rules.text(pattern, what)`… Each rule carries the hostile
 * values the conformance suite feeds it. Throws nothing (a rule throws InvalidArgumentError when it
 * checks a bad value).
 */
export const rules = {
  /** `alias(of, rule)`: another name for option `of`, read as `of`; both given is refused. */
  alias,
  /** `count(min, max)`: a whole number from `min` to `max`. */
  count,
  /** `true` or `false` (the string `'false'` is not false). */
  flag,
  /** `instance(accepts, wanted)`: anything `accepts` says yes to (a driver's client or pool), described as `wanted`. */
  instance,
  /** `ms(min = 1)`: a delay or timeout a timer is armed with, from `min` up to Node's timer range (about 24.8 days). */
  ms,
  /** `nested(rules)`: an object of sub-options, each read by its rule (errors name `parent.option`). */
  nested,
  /** `oneOf(values)`: one of `values`. */
  oneOf,
  /** `wholeMs(min = 1)`: a whole number of ms from `min` up to Node's timer range. */
  wholeMs,
  /** `refuse(name, wanted, value)`: throws InvalidArgumentError `<name> must be <wanted>, got <what value is>`, for a rule of a backend's own. */
  refuse,
  /** `required(rule)`: an option that must be given, checked by `rule`. */
  required,
  /** `unknownOption(name, known, where)`: the message `readOptions` gives for an option `where` does not take, for a reader of its own (the CLI's flags). */
  unknownOption,
  /** A plain object of further settings passed on as they are (a driver's own options). */
  settings,
  /** `share(min, below)`: a number (fractions allowed) from `min` up to, but not including, `below`. */
  share,
  /** An `AbortSignal`. */
  signal,
  /** `text(pattern, wanted, hostile?)`: a string matching `pattern`, described as `wanted` in errors. */
  text,
  /** `url(schemes, hostless?)`: a store URL with one of `schemes`, parsed, its password kept out of every message. */
  url,
  /** A caller's wait: any number of ms ≥ 0, Infinity meaning no limit. */
  wait,
} as const;
