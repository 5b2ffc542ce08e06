import pino, { type Logger } from 'pino';

/**
 * JSON logs (pino). The pipeline logs ids, states and counts, never patient data; redaction is
 * the second line of defence: names, birth dates, member ids and every secret are censored
 * wherever they appear in a logged object, unless an operator explicitly enables patient data.
 */
const PATIENT_FIELDS = ['firstName', 'middleName', 'lastName', 'family', 'given', 'name', 'birthDate', 'dateOfBirth', 'memberId', 'subscriberId'];
const SECRET_FIELDS = ['apiKey', 'secret', 'password', 'token', 'bearerToken', 'authorization', 'cookie', 'privateKey', 'webhookSecret'];

export interface LoggerOptions {
  level?: string;
  /** Log patient data instead of censoring it (never in production). */
  includePatientData?: boolean;
  /** Where the JSON lines go; standard error by default (standard output carries the `listening:` lines). */
  destination?: NodeJS.WritableStream;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const fields = [...SECRET_FIELDS, ...(options.includePatientData ? [] : PATIENT_FIELDS)];
  const paths = fields.flatMap((f) => [f, `*.${f}`, `*.*.${f}`, `*.*.*.${f}`]);
  return pino(
    { level: options.level ?? 'info', base: { service: 'dental-elig' }, redact: { paths, censor: '[redacted]' } },
    (options.destination ?? process.stderr) as pino.DestinationStream,
  );
}

export type { Logger };
