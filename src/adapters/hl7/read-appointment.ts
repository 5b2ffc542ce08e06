import { isValidNpi, type Provider } from '../../domain';
import { sameText } from '../clinic-routing';
import type { CodeTables, ProviderRole } from './code-tables';
import { readPersons, type Person } from './data-types';
import type { FieldPath } from './field-path';
import { warningAt, type Hl7Problem } from './hl7-errors';
import type { Hl7Message, Hl7Segment } from './hl7-message';
import type { Hl7Profile } from './profile';
import { fieldsWithValues, firstValue, whereFound } from './read-fields';
import { readDate } from './read-patient';

export interface AppointmentReading {
  appointmentId?: string;
  /** The start's date as written. */
  dateOfService: string;
  provider?: Provider;
}

export function readAppointmentId(message: Hl7Message, profile: Hl7Profile): string | undefined {
  return firstValue(message.segments, profile.appointment.id)?.value;
}

export function readAppointment(message: Hl7Message, profile: Hl7Profile, codes: CodeTables, problems: Hl7Problem[], warnings: Hl7Problem[]): AppointmentReading | undefined {
  const appointmentId = readAppointmentId(message, profile);
  const dateOfService = readDate(message, profile.appointment.start, 'appointment start', problems);
  const provider = readProvider(message, profile, codes, warnings);
  if (!dateOfService) return undefined;
  return { dateOfService, ...(appointmentId && { appointmentId }), ...(provider && { provider }) };
}

type PersonField = ReturnType<typeof fieldsWithValues>[number];

/**
 * The treating dentist, not the hygienist or assistant a dental appointment often lists first:
 * persons whose role (AIP-4, AIG-4; mappings/hl7/provider-role.json) names one who assists are
 * read only when no other gives a provider, and those whose role names a dentist, or the
 * attending or primary provider, come before the rest. With no role read, the persons in field
 * order, as providerAmong reads them.
 */
function readProvider(message: Hl7Message, profile: Hl7Profile, codes: CodeTables, warnings: Hl7Problem[]): Provider | undefined {
  const fields = fieldsWithValues(message.segments, profile.appointment.provider);
  // Roles only choose between persons: a message naming one, as most do, reads none.
  if (fields.length < 2) return providerAmong(fields, warnings);
  const roles = fields.map((found) => roleOf(found.segment, profile.appointment.providerRole, codes));
  const withRole = (role: ProviderRole | undefined) => fields.filter((_, i) => roles[i] === role);
  return providerAmong([...withRole('treating'), ...withRole(undefined)], warnings) ?? providerAmong(withRole('assisting'), warnings);
}

/** The role the first of the paths in the person's own segment names, when the table lists it. */
function roleOf(segment: Hl7Segment, paths: readonly FieldPath[], codes: CodeTables): ProviderRole | undefined {
  for (const path of paths) {
    if (path.segment !== segment.name) continue;
    const role = codes.providerRole(segment.value(path.field, path.component, path.subcomponent));
    if (role) return role;
  }
  return undefined;
}

/**
 * The provider from the first person field (AIP-3, PV1-7, AIG-3, ...) that carries an NPI, NPI
 * and name both from that field, so they name the same person; only when no field has an NPI, the
 * name of the first named field. Within a field, the repetition typed NPI (XCN-13) wins, else the
 * first with a valid ten-digit id. Ten digits that fail the NPI check digit are a typo, not a
 * local id (local ids are shorter): the payer needs no NPI to answer, so the check goes ahead
 * with that person's name and a warning naming the field.
 */
function providerAmong(fields: readonly PersonField[], warnings: Hl7Problem[]): Provider | undefined {
  let named: Person | undefined;
  for (const found of fields) {
    const persons = readPersons(found.segment, found.path.field);
    const reading = readNpi(persons);
    if (!reading) {
      named ??= persons.find(hasName);
      continue;
    }
    const npi = 'problem' in reading ? undefined : reading.npi;
    if ('problem' in reading) {
      warnings.push(warningAt({ ...whereFound(found), repetition: reading.person.repetition + 1, component: 1 }, 102, `${reading.problem}: verified without it`));
    }
    // The NPI's repetition names the person; failing that, another repetition of the same field.
    return providerOf(npi, reading.person.lastName === undefined ? (persons.find(hasName) ?? reading.person) : reading.person);
  }
  return named && providerOf(undefined, named);
}

const TEN_DIGITS = /^\d{10}$/;

const hasName = (p: Person) => p.lastName !== undefined;

/** The repetition typed NPI (XCN-13), else the first whose id is a valid NPI, else the first ten-digit typo. */
function readNpi(persons: readonly Person[]): { person: Person; npi: string } | { person: Person; problem: string } | undefined {
  const typed = persons.find((p) => sameText(p.idType ?? '', 'NPI'));
  if (typed) return checkNpi(typed);
  const tenDigits = persons.filter((p) => TEN_DIGITS.test(p.id ?? ''));
  const candidate = tenDigits.find((p) => isValidNpi(p.id ?? '')) ?? tenDigits[0];
  return candidate && checkNpi(candidate);
}

function checkNpi(person: Person): { person: Person; npi: string } | { person: Person; problem: string } {
  const id = person.id ?? '';
  if (isValidNpi(id)) return { person, npi: id };
  return { person, problem: TEN_DIGITS.test(id) ? 'provider NPI fails the check digit' : 'provider NPI is not ten digits' };
}

function providerOf(npi: string | undefined, person: Person): Provider | undefined {
  const { firstName, lastName } = person;
  if (!npi && !firstName && !lastName) return undefined;
  // Key by key, not spread by spread: see readPatient.
  const provider: Provider = {};
  if (npi) provider.npi = npi;
  if (firstName) provider.firstName = firstName;
  if (lastName) provider.lastName = lastName;
  return provider;
}
