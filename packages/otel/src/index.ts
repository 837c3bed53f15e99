/** @module @deadbolt/otel */
// OpenTelemetry for deadbolt: subscribes to the events every locker publishes on
// node:diagnostics_channel (core's diagnostics.ts) and records them with the OpenTelemetry API,
// so it works with whatever SDK the application set up (or none: the API's no-op providers).
// There are no semantic conventions for locks yet; names live under `deadbolt.`, and a store's
// kind goes in `db.system.name` where OpenTelemetry names it.
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { AcquireEvent, LeaseEvent, LeaseLostEvent, RenewalFailedEvent } from '@deadbolt/core';
import { readOptions, rules, type Rules } from '@deadbolt/core/backend';
import {
  context,
  metrics,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type MeterProvider,
  type Span,
  type TracerProvider,
} from '@opentelemetry/api';

/** Options of `instrumentDeadbolt`; unknown names are `InvalidArgumentError`. */
export interface DeadboltInstrumentationOptions {
  /** Default: the global one (`trace.getTracerProvider()`). */
  tracerProvider?: TracerProvider;
  /** Default: the global one (`metrics.getMeterProvider()`). */
  meterProvider?: MeterProvider;
  /**
   * Put each lock's key on its spans (`deadbolt.key`; hashed where the locker has `redactKeys`).
   * Default true. Metrics never carry keys: one series per key would have no bound.
   */
  keysOnSpans?: boolean;
}

/** What `instrumentDeadbolt` returns. */
export interface DeadboltInstrumentation {
  /** Stops recording: every subscription is removed; spans already started end as their calls do not (they are dropped). */
  disable(): void;
}

/** `db.system.name` for the stores OpenTelemetry's database conventions name. */
const DB_SYSTEM: Record<string, string> = {
  redis: 'redis',
  redlock: 'redis',
  postgres: 'postgresql',
  mysql: 'mysql',
  cassandra: 'cassandra',
};

const NAME = '@deadbolt/otel';

/** How each option is checked: as every deadbolt options object, own properties only and no unknown names. */
const OPTION_RULES = {
  tracerProvider: rules.settings,
  meterProvider: rules.settings,
  keysOnSpans: rules.flag,
} satisfies Rules<DeadboltInstrumentationOptions>;

/**
 * Records deadbolt's events with OpenTelemetry until `disable()`:
 * - a span per acquisition (`deadbolt.acquire`), release and extend, a child of the context active
 *   when the call started; a failed call's span has status ERROR and the error recorded, and ends
 *   once, when the call settles;
 * - histograms `deadbolt.lock.wait.duration` (s, every acquisition, by `deadbolt.outcome`:
 *   granted, busy, or the error's code) and `deadbolt.lock.hold.duration` (s, each hold ended by a
 *   release or a loss); up-down counters `deadbolt.lock.held` and `deadbolt.lock.waiting`;
 *   counters `deadbolt.lock.lost` and `deadbolt.lock.renewal.failures`;
 * every record with `deadbolt.backend`, `deadbolt.family` where it applies, and `db.system.name`;
 * spans also with `server.address` and `server.port` where the backend knows its store's address.
 * Calling it twice records twice. Never throws from a subscriber: a recording that fails is dropped
 * (a throwing subscriber would be an uncaught exception in the application).
 * @throws InvalidArgumentError for options that are not an object, an option it does not know (a
 * misspelt one: the message names the option it probably meant), or one of the wrong type.
 */
export function instrumentDeadbolt(given?: DeadboltInstrumentationOptions): DeadboltInstrumentation {
  const options = readOptions(given, OPTION_RULES, 'instrumentDeadbolt') as DeadboltInstrumentationOptions;
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(NAME);
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(NAME);
  const keysOnSpans = options.keysOnSpans ?? true;
  const waitDuration = meter.createHistogram('deadbolt.lock.wait.duration', {
    unit: 's',
    description: 'How long acquisitions took, from the call to its answer',
  });
  const holdDuration = meter.createHistogram('deadbolt.lock.hold.duration', {
    unit: 's',
    description: 'How long locks were held, until released or lost',
  });
  const held = meter.createUpDownCounter('deadbolt.lock.held', { description: 'Locks held by this process' });
  const waiting = meter.createUpDownCounter('deadbolt.lock.waiting', { description: 'Acquisitions waiting in this process' });
  const lost = meter.createCounter('deadbolt.lock.lost', { description: 'Held locks lost (not released)' });
  const renewalFailures = meter.createCounter('deadbolt.lock.renewal.failures', { description: 'Background renewals that failed' });

  /** The span and whether it counted as waiting, per acquisition context object (the channel hands back the same object). */
  const acquiring = new WeakMap<object, { span: Span; waits: boolean }>();
  const leaseSpans = new WeakMap<object, Span>();
  /**
   * Holds counted in `held`, by backend, token and key, with the attributes they were counted
   * under (a release does not say the family): a lost lease released later is taken off once.
   */
  const holding = new Map<string, Attributes>();
  const holdId = (e: { backend: string; token: bigint; key: string }) => `${e.backend}\u0000${e.token}\u0000${e.key}`;
  // Built once per backend, family and address, not per call: every lock call records several times.
  const memo = <T>(make: (key: string) => T) => {
    const made = new Map<string, T>();
    return (key: string): T => {
      let value = made.get(key);
      if (value === undefined) made.set(key, (value = make(key)));
      return value;
    };
  };
  const baseOf = memo((id): Attributes => {
    const [backend, family] = id.split('\u0000') as [string, string];
    return {
      'deadbolt.backend': backend,
      ...(family ? { 'deadbolt.family': family } : {}),
      ...(DB_SYSTEM[backend] ? { 'db.system.name': DB_SYSTEM[backend] } : {}),
    };
  });
  const base = (backend: string, family?: string): Attributes => baseOf(`${backend}\u0000${family ?? ''}`);
  /** Spans only (a metric per server would multiply its series): the first server as `server.address` and `server.port`, all of them as `deadbolt.servers` when there are several. */
  const serverOf = memo((address): Attributes => {
    const first = /^(\[[^\]]+\]|[^:,\s]+)(?::(\d+))?/.exec(address);
    return {
      'server.address': (first?.[1] ?? address).replace(/^\[(.*)\]$/, '$1'),
      ...(first?.[2] ? { 'server.port': Number(first[2]) } : {}),
      ...(/[,\s]/.test(address) ? { 'deadbolt.servers': address } : {}),
    };
  });
  const server = (address: string | undefined): Attributes => (address ? serverOf(address) : {});
  const outcomeOf = (e: AcquireEvent) =>
    e.error ? String((e.error as { code?: unknown }).code ?? 'error') : e.result ? 'granted' : 'busy';
  const ended = (span: Span, error: unknown) => {
    if (error !== undefined) {
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    span.end();
  };
  // Every handler is wrapped: nothing it does may throw into the lock call's path.
  const safe =
    <T>(fn: (event: T) => void) =>
    (message: unknown) => {
      try {
        fn(message as T);
      } catch {
        // dropped: a recording must never fail the application
      }
    };

  const handlers: Record<string, (message: unknown) => void> = {
    'tracing:deadbolt:acquire:start': safe<AcquireEvent>((e) => {
      const span = tracer.startSpan(
        'deadbolt.acquire',
        {
          kind: SpanKind.CLIENT,
          attributes: {
            ...base(e.backend, e.family),
            ...server(e.address),
            ...(keysOnSpans ? { 'deadbolt.key': e.key } : {}),
            'deadbolt.ttl_ms': e.ttlMs,
            ...(Number.isFinite(e.timeoutMs) ? { 'deadbolt.timeout_ms': e.timeoutMs } : {}),
            ...(e.limit ? { 'deadbolt.limit': e.limit } : {}),
          },
        },
        context.active(),
      );
      const waits = e.timeoutMs > 0;
      if (waits) waiting.add(1, base(e.backend, e.family));
      acquiring.set(e, { span, waits });
    }),
    'tracing:deadbolt:acquire:asyncEnd': safe<AcquireEvent>((e) => {
      const started = acquiring.get(e);
      if (!started) return;
      acquiring.delete(e);
      const attributes = base(e.backend, e.family);
      if (started.waits) waiting.add(-1, attributes);
      const outcome = outcomeOf(e);
      waitDuration.record((e.waitedMs ?? 0) / 1000, { ...attributes, 'deadbolt.outcome': outcome });
      started.span.setAttribute('deadbolt.outcome', outcome);
      if (e.attempts !== undefined) started.span.setAttribute('deadbolt.attempts', e.attempts);
      if (e.token !== undefined) {
        started.span.setAttribute('deadbolt.token', String(e.token));
        holding.set(holdId({ backend: e.backend, token: e.token, key: e.key }), attributes);
        held.add(1, attributes);
      }
      ended(started.span, e.error);
    }),
    ...leaseSpan('release', (e) => e.heldMs !== undefined && holdEnded(e, e.heldMs, 'released')),
    ...leaseSpan('extend'),
    'deadbolt:lease-lost': safe<LeaseLostEvent>((e) => {
      lost.add(1, base(e.backend));
      holdEnded(e, e.heldMs, 'lost');
    }),
    'deadbolt:renewal-failed': safe<RenewalFailedEvent>((e) => renewalFailures.add(1, base(e.backend))),
  };

  /** A hold counted at its grant ends (the first of its release and its loss): off the gauge, into the histogram. */
  function holdEnded(e: { backend: string; token: bigint; key: string }, heldMs: number, how: 'released' | 'lost'): void {
    const id = holdId(e);
    const attributes = holding.get(id);
    if (!attributes) return;
    holding.delete(id);
    held.add(-1, attributes);
    holdDuration.record(heldMs / 1000, { ...attributes, 'deadbolt.ended': how });
  }

  /** The start and asyncEnd handlers of release or extend: a span each, and `onStart` for the metrics. */
  function leaseSpan(name: 'release' | 'extend', onStart?: (e: LeaseEvent) => unknown): Record<string, (message: unknown) => void> {
    return {
      [`tracing:deadbolt:${name}:start`]: safe<LeaseEvent>((e) => {
        const attributes: Attributes = {
          ...base(e.backend),
          ...server(e.address),
          ...(keysOnSpans ? { 'deadbolt.key': e.key } : {}),
          'deadbolt.token': String(e.token),
          ...(e.ttlMs !== undefined ? { 'deadbolt.ttl_ms': e.ttlMs } : {}),
        };
        leaseSpans.set(e, tracer.startSpan(`deadbolt.${name}`, { kind: SpanKind.CLIENT, attributes }, context.active()));
        onStart?.(e);
      }),
      [`tracing:deadbolt:${name}:asyncEnd`]: safe<LeaseEvent>((e) => {
        const span = leaseSpans.get(e);
        if (!span) return;
        leaseSpans.delete(e);
        ended(span, e.error);
      }),
    };
  }

  for (const [name, handler] of Object.entries(handlers)) subscribe(name, handler);
  return {
    disable: () => {
      for (const [name, handler] of Object.entries(handlers)) unsubscribe(name, handler);
    },
  };
}
