import { isDeepStrictEqual } from 'node:util';
import type { Command } from 'commander';
import { loadClinicRouting } from '../adapters/clinic-routing';
import {
  buildChecks,
  describeProblem,
  describeProblems,
  handleHl7Message,
  InMemoryPatientInsuranceStore,
  loadHl7Mappings,
  splitMessages,
  type AppointmentBasis,
} from '../adapters/hl7';
import type { EligibilityCheck, PatientKey, PayerResolver } from '../domain';
import { charsetOptionsSchema, decodeFrame } from '../service/hl7-charset';
import { asRequest, shapeOf } from './as-request';
import { ENV, readsEnvironment } from './service-context';
import { CliError, inputName, instant, loadCatalog, readInputBytes, say, writeJson, type CliIo } from './io';

interface ConvertHl7Options {
  as: string;
  catalog?: string;
  portal?: string;
  receivedAt?: string;
}

export function registerConvertHl7(convert: Command, io: CliIo): void {
  readsEnvironment(
  convert
    .command('hl7 <file>')
    .description(
      'HL7 v2 SIU/ADT messages (one, several, or a batch file; `-` for stdin) to the eligibility checks they make, as one JSON array. ' +
        'Messages run in file order through one in-memory patient store, so an ADT earlier in the file gives a SIU its insurance; ' +
        'checks a later message reschedules or cancels are left out, unless another appointment of that day still needs them; ' +
        "a merge (A40, A34, A47) makes the duplicate's bookings the kept patient's.",
    )
    .option('--as <shape>', 'check (EligibilityCheck) or request (the v2 verification request body)', 'check')
    .option('--catalog <file>', 'a saved payer catalog (setup payers sync): resolves each payer and its portal')
    .option('--portal <id>', 'with --as request: the portal to verify on, for payers the catalog does not settle')
    .option('--received-at <instant>', 'the receipt time written into each check (default now), for reproducible output', instant('--received-at'))
    .action(async (file: string, opts: ConvertHl7Options) => {
      const shape = shapeOf(opts.as);
      const receivedAt = opts.receivedAt ?? new Date().toISOString();
      const resolver = opts.catalog ? await loadCatalog(io, opts.catalog) : undefined;
      const checks = await convertHl7(hl7Text(await readInputBytes(io, file), file), { receivedAt, resolver, warn: (text) => say(io, `warning: ${text}`) }, file);
      writeJson(io, shape === 'request' ? checks.map((c) => asRequest(c, opts.portal)) : checks);
    }),
    [ENV.mappings],
  );
}

/**
 * A file's text in the character set its first MSH-18 names, UTF-8 when it names none, as serve
 * reads a frame: read as UTF-8 whatever it said, a file a Windows PMS wrote in 8859/1 printed
 * checks for JOS\uFFFD with the replacement marks the payer would have been sent.
 */
function hl7Text(bytes: Buffer, file: string): string {
  const decoded = decodeFrame(bytes, charsetOptionsSchema.parse({}));
  if (!decoded.ok) throw new CliError(`${inputName(file)}: ${describeProblem(decoded.problem)}`);
  return decoded.text;
}

/**
 * Every message in order; the checks still pending at the end of the file, in the order their
 * appointments were first booked. Checks are kept by the appointment that made them: a
 * reschedule replaces that appointment's checks, a cancellation (with or without its patient)
 * drops them, and a check two appointments of the same day share stays while either holds it.
 */
async function convertHl7(text: string, options: { receivedAt: string; resolver: PayerResolver | undefined; warn: (text: string) => void }, file: string): Promise<EligibilityCheck[]> {
  const messages = splitMessages(text);
  if (messages.length === 0) throw new CliError(`${inputName(file)}: no HL7 message found`);
  const handlerOptions = {
    mappings: loadHl7Mappings(),
    routing: loadClinicRouting(),
    store: new InMemoryPatientInsuranceStore(),
    resolver: options.resolver,
    receivedAt: options.receivedAt,
  };
  const byAppointment = new Map<string, { patientKey: PatientKey; basis: AppointmentBasis; checks: EligibilityCheck[] }>();
  for (const [index, message] of messages.entries()) {
    const { header, outcome, warnings } = await handleHl7Message(message, handlerOptions);
    const named = header?.controlId || `#${index + 1}`;
    if (outcome.kind === 'reject') throw new CliError(`${named}: ${describeProblems(outcome.problems)}`);
    // What serve's ACK would say in its W ERRs (a plan not in force, one listed twice): a check left out is said so, not a bare [].
    for (const warning of warnings ?? []) options.warn(`${named}: ${describeProblem(warning)}`);
    // Appointment ids are the sender's: keyed with its facility; checks of an appointment without an id stand alone.
    const facility = header?.sendingFacility.split(header.delimiters.component)[0]?.trim().toUpperCase() ?? '';
    const appointment = (id: string | undefined) => (id === undefined ? `#${index}` : JSON.stringify([facility, id]));
    if (outcome.kind === 'book' || outcome.kind === 'reschedule') {
      byAppointment.set(appointment(outcome.appointmentId), { patientKey: outcome.patientKey, basis: outcome.appointment, checks: outcome.checks });
    } else if (outcome.kind === 'cancel') {
      byAppointment.delete(appointment(outcome.appointmentId));
    } else if (outcome.kind === 'merge') {
      // As the pipeline does: the prior's appointments, and the survivor's when the merge changed its record, verified as the survivor's.
      for (const { priorKey, patientKey, record, changed } of outcome.merges) {
        for (const [id, booked] of byAppointment) {
          if (!isDeepStrictEqual(booked.patientKey, priorKey) && !(changed && isDeepStrictEqual(booked.patientKey, patientKey))) continue;
          const checks = buildChecks({ ...booked.basis, patient: record.patient, coverages: record.coverages, resolver: options.resolver });
          byAppointment.set(id, { ...booked, patientKey, checks });
        }
      }
    }
  }
  const pending = new Map<string, EligibilityCheck>();
  for (const check of [...byAppointment.values()].flatMap((booked) => booked.checks)) {
    if (!pending.has(check.idempotencyKey)) pending.set(check.idempotencyKey, check);
  }
  return [...pending.values()];
}
