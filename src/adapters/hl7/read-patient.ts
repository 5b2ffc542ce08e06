import type { Identifier, Patient, PatientKey } from '../../domain';
import type { CodeTables } from './code-tables';
import { readIdentifiers, readLegalName, type PersonName } from './data-types';
import type { FieldPath } from './field-path';
import { readHl7Date } from './hl7-date';
import { problemAt, type Hl7Problem } from './hl7-errors';
import type { Hl7Message, Hl7Segment } from './hl7-message';
import type { Hl7Profile } from './profile';
import { fieldsWithValues, firstValue, whereFound, whereMissing } from './read-fields';

export type PatientDemographics = Omit<Patient, 'memberId'>;

/** The patient's identifiers (PID-3), keyed to the sending facility: how the store knows them. */
export function readPatientKey(message: Hl7Message, profile: Hl7Profile, facility: string): PatientKey | undefined {
  return patientKey(readIdentifierList(message.segments, profile.patient.identifiers), facility);
}

/** readPatientKey for identifiers read already (readPatient's). */
export function patientKey(identifiers: readonly Identifier[], facility: string): PatientKey | undefined {
  const id = identifiers[0];
  return id ? { facility, identifier: { value: id.value, ...(id.system !== undefined && { system: id.system }) } } : undefined;
}

/** The patient's demographics, or undefined with the problems added; from one patient group of a merge, or the whole message. */
export function readPatient(message: Pick<Hl7Message, 'segments'>, profile: Hl7Profile, codes: CodeTables, problems: Hl7Problem[]): PatientDemographics | undefined {
  const scope = message.segments;
  const paths = profile.patient;
  const identifiers = readIdentifierList(scope, paths.identifiers);
  if (identifiers.length === 0) problems.push(problemAt(whereMissing(scope, paths.identifiers), 101, 'patient identifier missing'));
  const name = readName(message, paths.name, 'patient', problems);
  const birthDate = readDate(message, paths.birthDate, 'birth date', problems);
  const genderCode = firstValue(scope, paths.gender);
  if (identifiers.length === 0 || !name || !birthDate) return undefined;
  // Spreads last, here and in the objects built for every message: on Node 20 a property an object gets
  // after a spread has filled it is a call into V8's runtime, 0.6 to 2 us, where the whole object costs
  // 0.05. A copy that adds to what it copies is Object.assign's, an object of optional parts built key by key.
  return {
    lastName: name.lastName,
    firstName: name.firstName,
    birthDate,
    identifiers,
    ...(name.middleName && { middleName: name.middleName }),
    ...(genderCode && { gender: codes.gender(genderCode.value) }),
  };
}

/** The identifiers (CX, every repetition) of the first of the paths that has any: a patient's, or a merge's prior patient's. */
export function readIdentifierList(scope: readonly Hl7Segment[], paths: readonly FieldPath[]): Identifier[] {
  for (const { segment, path } of fieldsWithValues(scope, paths)) {
    const ids = readIdentifiers(segment, path.field);
    if (ids.length > 0) return ids;
  }
  return [];
}

/** A person's name from the first of the paths that has one; `who` goes into the reason. */
export function readName(
  message: Pick<Hl7Message, 'segments'>,
  paths: readonly FieldPath[],
  who: string,
  problems: Hl7Problem[],
): PersonName | undefined {
  let partial: ReturnType<typeof whereFound> | undefined;
  for (const found of fieldsWithValues(message.segments, paths)) {
    const name = readLegalName(found.segment, found.path.field);
    if (name) return name;
    partial ??= whereFound(found);
  }
  problems.push(
    partial
      ? problemAt(partial, 101, `${who} family or given name missing`)
      : problemAt(whereMissing(message.segments, paths), 101, `${who} name missing`),
  );
  return undefined;
}

/** A calendar date (YYYY-MM-DD) from the first of the paths that has a value; with an edge, one to the month or year is its first or last day (readHl7Date). */
export function readDate(
  message: Pick<Hl7Message, 'segments'>,
  paths: readonly FieldPath[],
  what: string,
  problems: Hl7Problem[],
  required = true,
  edge?: 'first' | 'last',
): string | undefined {
  const found = firstValue(message.segments, paths);
  if (!found) {
    if (required) problems.push(problemAt(whereMissing(message.segments, paths), 101, `${what} missing`));
    return undefined;
  }
  const reading = readHl7Date(found.value, edge);
  if (reading.ok) return reading.date;
  const reason = reading.reason === 'imprecise' ? `${what} needs year, month and day` : `${what} is not a valid HL7 date (YYYYMMDD[HHMM[SS]])`;
  problems.push(problemAt(whereFound(found), 102, reason));
  return undefined;
}
