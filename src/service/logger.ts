import pino, { type Logger } from 'pino';

/**
 * JSON logs (pino). The pipeline logs ids, states and counts, never patient data; censoring is
 * the second line of defence: names, birth dates, member ids and every secret are censored
 * wherever they appear in a logged object, at any depth, unless an operator explicitly enables
 * patient data.
 */
const PATIENT_FIELDS = ['firstName', 'middleName', 'lastName', 'family', 'given', 'name', 'birthDate', 'dateOfBirth', 'memberId', 'subscriberId'];
const SECRET_FIELDS = ['apiKey', 'secret', 'password', 'token', 'bearerToken', 'authorization', 'cookie', 'privateKey', 'webhookSecret'];
const CENSOR = '[redacted]';

export interface LoggerOptions {
  level?: string;
  /** Log patient data instead of censoring it (never in production). */
  includePatientData?: boolean;
  /** Where the JSON lines go; standard error by default (standard output carries the `listening:` lines). */
  destination?: NodeJS.WritableStream;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const fields = new Set([...SECRET_FIELDS, ...(options.includePatientData ? [] : PATIENT_FIELDS)]);
  // Not pino's `redact`: its wildcard paths (`*.*.*.name`) cost 70 µs and 190 KB of garbage a
  // line, more than everything else a morning-batch check logs, and reach only as deep as written.
  return pino(
    { level: options.level ?? 'info', base: { service: 'dental-elig' }, formatters: { log: (object) => censored(object, fields, new WeakSet()) as Record<string, unknown> } },
    (options.destination ?? process.stderr) as pino.DestinationStream,
  );
}

/**
 * The logged object with the value of every field named in `fields` censored, in plain objects
 * and arrays at any depth; the object itself when nothing is censored, as for almost every line.
 * Anything else (an Error, a Date) is left to pino's serializers.
 */
function censored(value: unknown, fields: ReadonlySet<string>, seen: WeakSet<object>): unknown {
  if (typeof value !== 'object' || value === null || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) {
    const items = value.map((item) => censored(item, fields, seen));
    return items.some((item, i) => item !== value[i]) ? items : value;
  }
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) return value;
  let copy: Record<string, unknown> | undefined;
  for (const [key, item] of Object.entries(value)) {
    const next = fields.has(key) && item !== undefined ? CENSOR : censored(item, fields, seen);
    if (next !== item) (copy ??= { ...value })[key] = next;
  }
  return copy ?? value;
}

export type { Logger };
