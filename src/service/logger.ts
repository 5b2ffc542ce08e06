import pino, { type Logger } from 'pino';

/**
 * JSON logs (pino). The pipeline logs ids, states and counts, never patient data; censoring is
 * the second line of defence: names, birth dates, member ids and every secret are censored
 * wherever they appear in a logged object, at any depth, unless an operator explicitly enables
 * patient data.
 */
const PATIENT_FIELDS = ['firstName', 'middleName', 'lastName', 'family', 'given', 'name', 'birthDate', 'dateOfBirth', 'memberId', 'subscriberId'];
const SECRET_FIELDS = ['apiKey', 'secret', 'previousSecret', 'password', 'token', 'bearerToken', 'authorization', 'cookie', 'privateKey', 'webhookSecret'];
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
  const censor = <T>(object: T): T => censored(object, fields, new WeakSet()) as T;
  const logger = pino(
    { level: options.level ?? 'info', base: { service: 'dental-elig' }, formatters: { log: censor } },
    (options.destination ?? process.stderr) as pino.DestinationStream,
  );
  // pino writes a child's bindings out once, as they are, past formatters.log: they are censored on
  // the way in. Children are made from the root by prototype, so theirs are these two as well.
  const { child, setBindings } = logger;
  logger.child = function (this: Logger, ...[bindings, childOptions]: Parameters<Logger['child']>) {
    return Reflect.apply(child, this, [censor(bindings), childOptions]) as ReturnType<Logger['child']>;
  } as Logger['child'];
  logger.setBindings = function (this: Logger, bindings: pino.Bindings) {
    setBindings.call(this, censor(bindings));
  };
  return logger;
}

/**
 * The logged object with the value of every field named in `fields` censored, in plain objects,
 * arrays and errors at any depth; the object itself when nothing is censored, as for almost every
 * line. An error censored is a copy with its prototype, so pino's serializer still writes out its
 * type, message and stack (and the fields it carries, which it runs after this). Anything else (a
 * Date, a Buffer) is left as it is.
 */
function censored(value: unknown, fields: ReadonlySet<string>, seen: WeakSet<object>): unknown {
  if (typeof value !== 'object' || value === null || seen.has(value)) return value;
  seen.add(value);
  if (Array.isArray(value)) {
    const items = value.map((item) => censored(item, fields, seen));
    return items.some((item, i) => item !== value[i]) ? items : value;
  }
  const prototype: unknown = Object.getPrototypeOf(value);
  const error = value instanceof Error;
  if (!error && prototype !== Object.prototype && prototype !== null) return value;
  let copy: object | undefined;
  for (const [key, item] of error ? errorFields(value) : Object.entries(value)) {
    const next = fields.has(key) && item !== undefined ? CENSOR : censored(item, fields, seen);
    if (next === item) continue;
    copy ??= error ? errorCopy(value, prototype as object) : { ...value };
    // Defined, not assigned: a key `__proto__` (JSON.parse makes one) or an error's getter stays a field.
    Object.defineProperty(copy, key, { value: next, enumerable: Object.prototype.propertyIsEnumerable.call(value, key), writable: true, configurable: true });
  }
  return copy ?? value;
}

/**
 * An error's fields, and an AggregateError's `errors`: not enumerable, but pino writes each of
 * them out (as aggregateErrors) with the fields it carries.
 */
function errorFields(error: Error): Array<[string, unknown]> {
  const errors = Object.getOwnPropertyDescriptor(error, 'errors');
  return errors && !errors.enumerable && Array.isArray(errors.value) ? [...Object.entries(error), ['errors', errors.value]] : Object.entries(error);
}

/**
 * An error's copy with its prototype and fields, each redefinable: a frozen error's are not, and
 * censoring one would throw out of the log call. Its stack is copied as the text it is: from V8 12
 * (Node 22) `stack` is an accessor that reads the stack kept inside the error it is called on,
 * which a copy does not have, so the copied accessor would read nothing.
 */
function errorCopy(error: Error, prototype: object): Error {
  const fields = Object.entries(Object.getOwnPropertyDescriptors(error)).map(([key, field]) => [key, { ...field, configurable: true }]);
  const copy = Object.create(prototype, Object.fromEntries(fields) as PropertyDescriptorMap) as Error;
  Object.defineProperty(copy, 'stack', { value: error.stack, enumerable: false, writable: true, configurable: true });
  return copy;
}

export type { Logger };
