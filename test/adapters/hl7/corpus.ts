import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { loadClinicRouting, type ClinicRouting } from '../../../src/adapters/clinic-routing';
import {
  ackFor,
  handleHl7Message,
  InMemoryPatientInsuranceStore,
  loadHl7Mappings,
  parseHl7Message,
  splitMessages,
  type Ack,
  type Hl7Outcome,
  type Hl7Result,
} from '../../../src/adapters/hl7';
import { projectRoot } from '../../../src/mapping-files';
import { fixturePayers } from './fixture-payers';

/**
 * The fixtures/hl7 corpus, run the way the adapter runs in production: every file through its own
 * in-memory store, its messages in file order. Used by the golden-file test and the corpus rules.
 */
export const FIXTURE_DIR = path.join(projectRoot, 'fixtures', 'hl7');

/** Every fixture is received at this instant, so outputs are reproducible. */
export const RECEIVED_AT = '2024-05-01T12:00:00.000Z';

/** clinics.json without its default: a fixture from an unknown facility must be an error. */
export function fixtureRouting(): ClinicRouting {
  const { defaultClinicId: _default, ...routing } = loadClinicRouting();
  return routing;
}

export function fixtureNames(): string[] {
  return readdirSync(FIXTURE_DIR)
    .filter((f) => f.endsWith('.hl7'))
    .map((f) => f.slice(0, -'.hl7'.length))
    .sort();
}

export interface RunMessage {
  text: string;
  result: Hl7Result;
  /** The acknowledgements sent, in order: one in original mode, none to two in enhanced mode. */
  acks: Ack[];
}

const mappings = loadHl7Mappings();

export async function runFixture(name: string): Promise<RunMessage[]> {
  const store = new InMemoryPatientInsuranceStore();
  const options = { mappings, routing: fixtureRouting(), store, resolver: fixturePayers, receivedAt: RECEIVED_AT };
  const runs: RunMessage[] = [];
  for (const text of splitMessages(readFileSync(path.join(FIXTURE_DIR, `${name}.hl7`), 'utf8'))) {
    const result = await handleHl7Message(text, options);
    runs.push({ text, result, acks: ackFor(result) });
  }
  return runs;
}

export interface ExpectedErr {
  /** ERR-1 (error code and location, v2.3/2.4 form), present only when written. */
  eld?: string;
  /** ERR-2 as written: segment^sequence^field^repetition^component. */
  location: string;
  /** ERR-3 as written: table 0357 code^text^HL70357. */
  code: string;
  /** ERR-4, written only when it is W (a warning); E otherwise. */
  severity?: 'W';
  /** ERR-8, decoded. */
  text: string;
}

export interface ExpectedMessage {
  controlId: string;
  /** The codes of the ACKs sent, in order, joined by `+` (`AE`; `CA+AE` in enhanced mode). */
  ack: string;
  outcome?: Exclude<Hl7Outcome, { kind: 'reject' }>;
  /** The last ACK's ERRs: a rejection's errors, and the warnings of a message used despite them. */
  errors?: ExpectedErr[];
}

/** What the golden files hold for one message: the ACK codes, the outcome unless rejected, and the last ACK's ERRs if it has any. */
export function observed(run: RunMessage): ExpectedMessage {
  const { outcome } = run.result;
  const base = { controlId: run.result.header?.controlId ?? '', ack: run.acks.map((a) => a.code).join('+') };
  const last = run.acks.at(-1);
  const errors = (last ? parseHl7Message(last.text).all('ERR') : []).map((err) => {
    const eld = err.rawField(1);
    const severity = err.value(4) === 'W' ? { severity: 'W' as const } : {};
    return { ...(eld && { eld }), location: err.rawField(2), code: err.rawField(3), ...severity, text: err.value(8) };
  });
  if (outcome.kind === 'reject') return { ...base, errors };
  return { ...base, outcome: JSON.parse(JSON.stringify(outcome, withoutPlumbing)), ...(errors.length > 0 && { errors }) };
}

/**
 * What a message means is in the golden files; what the pipeline carries along to act on it (the
 * patient key, the appointment's basis, the whole record) is checked by the pipeline's own tests.
 */
function withoutPlumbing(key: string, value: unknown): unknown {
  return key === 'patientKey' || key === 'appointment' || key === 'record' ? undefined : value;
}
