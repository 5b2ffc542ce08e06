import { EligibilityCheck, idempotencyKey, IsoInstant, type PayerResolver, type Provider } from '../../../domain';
import { clinicTimeZone, resolveClinic, type ClinicRouting } from '../../clinic-routing';
import { dateOfStart } from '../../local-date';
import { describeFhirIssue, FhirInputError, type FhirIssue } from '../operation-outcome';
import { BundleIndex, relativeTail, type AnyResource } from './bundle-index';
import { appointmentStatusRule } from './appointment-status';
import { activeCoverages, coverageFacts, coverageOrders } from './coverage';
import { inForceOn } from './coverage-period';
import { mergedInto } from './merged-patient';
import { birthDate, gender, identifiers, personName } from './person';
import { providerOf } from './provider';
import { Appointment, Location, parseResource, Patient, Practitioner, pathOf, type Identifier, type Reference } from './shapes';

export interface FhirInputOptions {
  /** Which Appointment of the Bundle to verify; needed only when it holds several. */
  appointmentId?: string;
  routing: ClinicRouting;
  /** A payer catalog; when given, each check carries the payer resolution. */
  resolver?: PayerResolver;
  /** When the event was received (ISO 8601 with offset). */
  receivedAt: string;
}

/** What a Bundle's appointment makes: its checks, and what was left out of them and why. */
export interface FhirConversion {
  /** One per coverage in force on the date of service, primary first. */
  checks: EligibilityCheck[];
  /**
   * Warnings and information, each naming an element: a coverage not in force on the date of
   * service (no check), an invalid NPI (left out; each check carries the warning too). Errors
   * are not here: they throw FhirInputError.
   */
  notes: FhirIssue[];
  /** The Appointment.status when mappings/fhir/appointment-status.json does not verify it: why there are no checks. */
  unverifiedStatus?: string;
  /** `Patient/id` of the patient verified: the appointment's, or the record it was merged into. */
  patient?: string;
  /**
   * The patient's active Coverages, in force on the date of service or not, as relative references:
   * a Coverage a check was read from that is not among them is gone from the patient (deleted, moved
   * to another patient, its status ended), as a plan an HL7 record no longer lists. There when the patient was read.
   */
  coverages?: string[];
  /** The visit's date where the practice is (its clinic's time zone), the checks' date of service: there when the appointment is verified. */
  dateOfService?: string;
  /** The clinic the visit is at, when one was found: where its zone is, the visit's date is. */
  clinicId?: string;
}

/** The checks of convertBundle alone, for callers with no use for its notes. */
export function checksFromBundle(bundle: unknown, options: FhirInputOptions): EligibilityCheck[] {
  return convertBundle(bundle, options).checks;
}

/**
 * One EligibilityCheck per active coverage of the appointment's patient in force on the date of
 * service, primary first, with notes on what was left out. Missing or invalid data throws
 * FhirInputError naming every element at fault; a patient with no active coverage (self-pay),
 * or an appointment whose status mappings/fhir/appointment-status.json does not verify, gives no
 * checks.
 */
export function convertBundle(bundle: unknown, options: FhirInputOptions): FhirConversion {
  const receivedAt = IsoInstant.safeParse(options.receivedAt);
  if (!receivedAt.success) throw new FhirInputError([{ expression: 'receivedAt', diagnostics: receivedAt.error.issues[0]?.message ?? 'invalid', code: 'value' }]);
  const index = new BundleIndex(bundle);
  const issues: FhirIssue[] = [];

  const appointmentRaw = findAppointment(index, options.appointmentId);
  const appointment = parseResource(Appointment, appointmentRaw, 'Appointment', issues);
  if (!appointment) throw new FhirInputError(issues);
  if (appointment.status !== undefined && appointmentStatusRule(appointment.status) !== 'verify') return { checks: [], notes: [], unverifiedStatus: appointment.status };
  // The clinic first: its time zone dates the visit. What it finds wrong is reported after the patient's, as before.
  const clinicIssues: FhirIssue[] = [];
  const clinicId = clinicOf(index, appointmentRaw, appointment, options.routing, clinicIssues);
  const timeZone = clinicId ? clinicTimeZone(options.routing, clinicId) : undefined;
  const dateOfService = dateOfStart(appointment.start ?? '', timeZone);
  if (!dateOfService) {
    issues.push({ expression: 'Appointment.start', diagnostics: appointment.start ? 'must be a date-time' : 'required', code: appointment.start ? 'value' : 'required' });
  }

  const appointed = participant(index, appointmentRaw, appointment, 'Patient', issues);
  const patientRaw = appointed && mergedInto(index, appointed, issues);
  if (!patientRaw) throw new FhirInputError(issues);
  const patientResource = parseResource(Patient, patientRaw, 'Patient', issues);
  if (!patientResource) throw new FhirInputError(issues);
  const notes: FhirIssue[] = [];
  const active = activeCoverages(index, patientRaw, issues);
  const held = active.map(({ raw }) => index.relativeReference(raw));
  const coverages = inForceOn(index, active, dateOfService, notes, issues, timeZone);
  // Self-pay, or no coverage in force: nothing to verify, so nothing about the patient needs to be complete.
  if (coverages.length === 0 && issues.length === 0) return { checks: [], notes, patient: index.relativeReference(patientRaw), coverages: held, ...(dateOfService && { dateOfService }), ...(clinicId && { clinicId }) };
  const name = personName(patientResource.name, 'Patient', issues, dateOfService, timeZone);
  const dob = birthDate(patientResource.birthDate, 'Patient.birthDate', issues, true, dateOfService);
  const patientGender = gender(patientResource.gender, 'Patient.gender', issues);

  const warnings: FhirIssue[] = [];
  const patients = patientParticipants(index, appointmentRaw, appointment);
  if (patients > 1) {
    warnings.push({
      expression: 'Appointment.participant',
      diagnostics: `names ${patients} patients: only the first is verified; give each patient an appointment of their own`,
      code: 'not-supported',
      severity: 'warning',
    });
  }
  const provider = practitionerOf(index, appointmentRaw, appointment, dateOfService, timeZone, issues, warnings);
  issues.push(...clinicIssues);

  const orders = coverageOrders(coverages, issues);
  const patient = { raw: patientRaw, resource: patientResource, name, birthDate: dob };
  const facts = coverages.map((c, i) => coverageFacts(index, c, `Coverage[${i}]`, patient, dateOfService, timeZone, issues));
  if (issues.length > 0 || !name || !dob || !dateOfService || !clinicId) throw new FhirInputError(issues);

  const checks = coverages.map((c, i) => {
    const fact = facts[i];
    const order = orders[i];
    if (!fact || !order) throw new FhirInputError([{ expression: `Coverage[${i}]`, diagnostics: 'could not be read', code: 'processing' }]);
    const check = {
      clinicId,
      patient: { ...name, birthDate: dob, gender: patientGender, identifiers: identifiers(patientResource.identifier), memberId: fact.patientMemberId },
      subscriber: fact.subscriber,
      coverage: {
        order,
        payer: fact.payer,
        resolution: options.resolver?.resolve(fact.payer),
        groupNumber: fact.groupNumber,
        groupName: fact.groupName,
        planName: fact.planName,
      },
      provider,
      dateOfService,
    };
    const checkWarnings = warnings.length > 0 ? warnings.map(describeFhirIssue) : undefined;
    const parsed = EligibilityCheck.safeParse({
      ...check,
      idempotencyKey: idempotencyKey(check),
      source: {
        kind: 'fhir',
        appointment: index.relativeReference(appointmentRaw),
        patient: index.relativeReference(patientRaw),
        coverage: index.relativeReference(c.raw),
        insurer: fact.insurer,
        receivedAt: receivedAt.data,
      },
      warnings: checkWarnings,
    });
    if (!parsed.success) {
      throw new FhirInputError(parsed.error.issues.map((e) => ({ expression: pathOf('EligibilityCheck', e.path), diagnostics: e.message, code: 'value' })));
    }
    return parsed.data;
  });
  return { checks, notes: [...notes, ...warnings], patient: index.relativeReference(patientRaw), coverages: held, dateOfService, ...(clinicId && { clinicId }) };
}

function findAppointment(index: BundleIndex, appointmentId: string | undefined): AnyResource {
  const appointments = index.ofType('Appointment');
  const found = appointmentId === undefined ? appointments : appointments.filter((a) => a.id === appointmentId);
  if (found.length === 1 && found[0]) return found[0];
  const diagnostics =
    appointmentId !== undefined
      ? `the bundle holds no Appointment with id ${appointmentId}`
      : found.length === 0
        ? 'the bundle holds no Appointment'
        : `the bundle holds ${found.length} Appointments: name the one to verify`;
  throw new FhirInputError([{ expression: 'Appointment', diagnostics, code: found.length === 0 ? 'not-found' : 'multiple-matches' }]);
}

/**
 * The participant of a type: by its resolved resource, else by what its reference says it is.
 * Undefined when there is none; a participant of that type that does not resolve is an issue.
 */
function participant(index: BundleIndex, raw: AnyResource, appointment: Appointment, type: string, issues: FhirIssue[]): AnyResource | undefined {
  for (const p of appointment.participant ?? []) {
    if (!p.actor) continue;
    const resolved = index.resolve(p.actor, [type], raw);
    if (resolved.kind === 'found') return resolved.resource;
    if (claimsType(p.actor, type)) {
      issues.push({ expression: `Appointment.participant.actor.where(resolve() is ${type})`, diagnostics: resolved.problem, code: 'not-found' });
      return undefined;
    }
  }
  if (type === 'Patient') issues.push({ expression: 'Appointment.participant', diagnostics: 'required: a participant whose actor is the Patient', code: 'required' });
  return undefined;
}

/** How many patients the participants name, resolved or by what their reference says; one named twice is one. */
function patientParticipants(index: BundleIndex, raw: AnyResource, appointment: Appointment): number {
  const patients = new Set<unknown>();
  for (const p of appointment.participant ?? []) {
    if (!p.actor) continue;
    const resolved = index.resolve(p.actor, ['Patient'], raw);
    if (resolved.kind === 'found') patients.add(resolved.resource);
    else if (claimsType(p.actor, 'Patient')) patients.add(p.actor.reference ?? p.actor);
  }
  return patients.size;
}

function claimsType(ref: Reference, type: string): boolean {
  return ref.type === type || new RegExp(`(^|/)${type}/[^/]+$`).test(ref.reference ?? '');
}

function practitionerOf(index: BundleIndex, raw: AnyResource, appointment: Appointment, dateOfService: string | undefined, timeZone: string | undefined, issues: FhirIssue[], warnings: FhirIssue[]): Provider | undefined {
  const found = participant(index, raw, appointment, 'Practitioner', issues);
  if (!found) return undefined;
  const practitioner = parseResource(Practitioner, found, 'Practitioner', issues);
  return practitioner ? providerOf(practitioner, 'Practitioner', dateOfService, timeZone, warnings) : undefined;
}

/** The clinic from the appointment's Location (by reference, else by identifier), else the default. */
function clinicOf(index: BundleIndex, raw: AnyResource, appointment: Appointment, routing: ClinicRouting, issues: FhirIssue[]): string | undefined {
  let hints: { fhirLocation: string | undefined; fhirLocationIdentifiers: Identifier[] } | undefined;
  for (const p of appointment.participant ?? []) {
    if (!p.actor || hints) continue;
    const resolved = index.resolve(p.actor, ['Location'], raw);
    if (resolved.kind === 'found') {
      const location = parseResource(Location, resolved.resource, 'Location', issues);
      hints = { fhirLocation: index.relativeReference(resolved.resource), fhirLocationIdentifiers: location?.identifier ?? [] };
    } else if (claimsType(p.actor, 'Location')) {
      // Routing by reference or identifier needs no Location resource.
      const ref = p.actor.reference;
      hints = { fhirLocation: ref && (relativeTail(ref) ?? ref), fhirLocationIdentifiers: p.actor.identifier ? [p.actor.identifier] : [] };
    }
  }
  const clinicId = resolveClinic(routing, hints ?? {});
  if (!clinicId) {
    issues.push({
      expression: hints ? 'Location' : 'Appointment.participant',
      diagnostics: hints ? 'matches no clinic in mappings/clinics.json, which has no defaultClinicId' : 'no Location participant, and mappings/clinics.json has no defaultClinicId',
      code: 'not-found',
    });
  }
  return clinicId;
}
