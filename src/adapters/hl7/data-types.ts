import type { Identifier } from '../../domain';
import type { Hl7Segment } from './hl7-message';

/** HL7 composite data types, read component by component from one field. */

export interface PersonName {
  lastName: string;
  firstName: string;
  middleName?: string;
}

/**
 * XPN (family^given^middle). Some PMSs write the whole name in the first component as
 * "FAMILY, GIVEN MIDDLE"; with no given name and a comma, that form is split. Undefined when a
 * family or given name is missing.
 */
function readPersonName(segment: Hl7Segment, field: number, repetition = 0): PersonName | undefined {
  let lastName = segment.value(field, 1, 1, repetition).trim();
  let firstName = segment.value(field, 2, 1, repetition).trim();
  let middleName = segment.value(field, 3, 1, repetition).trim();
  if (!firstName && lastName.includes(',')) {
    const [family = '', rest = ''] = lastName.split(/\s*,\s*/, 2);
    const [given = '', ...middle] = rest.split(/\s+/);
    [lastName, firstName, middleName] = [family, given, middle.join(' ')];
  }
  if (!lastName || !firstName) return undefined;
  return middleName ? { lastName, firstName, middleName } : { lastName, firstName };
}

/**
 * XPN of a field that may repeat: the repetition XPN-7 calls the legal name (L), else the first
 * that is a whole name. A PMS may list an alias, a nickname or a maiden name first; the payer knows
 * the legal one.
 */
export function readLegalName(segment: Hl7Segment, field: number): PersonName | undefined {
  if (!segment.repeats(field)) return readPersonName(segment, field);
  let first: PersonName | undefined;
  for (let rep = 0; rep < segment.repetitions(field); rep++) {
    const name = readPersonName(segment, field, rep);
    if (!name) continue;
    if (segment.value(field, 7, 1, rep).trim().toUpperCase() === 'L') return name;
    first ??= name;
  }
  return first;
}

/** CX, every repetition: id^check digit^scheme^assigning authority^identifier type. */
export function readIdentifiers(segment: Hl7Segment, field: number): Identifier[] {
  const ids: Identifier[] = [];
  for (let rep = 0; rep < segment.repetitions(field); rep++) {
    const value = segment.value(field, 1, 1, rep).trim();
    if (!value) continue;
    const system = segment.value(field, 4, 1, rep).trim();
    const type = segment.value(field, 5, 1, rep).trim();
    ids.push({ value, ...(system && { system }), ...(type && { type }) });
  }
  return ids;
}

export interface Person {
  /** Which repetition of the field, from 0. */
  repetition: number;
  id?: string;
  /** XCN-13, the identifier type code (NPI, PRN, ...). */
  idType?: string;
  lastName?: string;
  firstName?: string;
}

/** XCN, every repetition: id^family^given^...^identifier type code (XCN-13). */
export function readPersons(segment: Hl7Segment, field: number): Person[] {
  const persons: Person[] = [];
  for (let repetition = 0; repetition < segment.repetitions(field); repetition++) {
    const id = segment.value(field, 1, 1, repetition).trim();
    const idType = segment.value(field, 13, 1, repetition).trim();
    const lastName = segment.value(field, 2, 1, repetition).trim();
    const firstName = segment.value(field, 3, 1, repetition).trim();
    persons.push({ repetition, ...(id && { id }), ...(idType && { idType }), ...(lastName && { lastName }), ...(firstName && { firstName }) });
  }
  return persons;
}
