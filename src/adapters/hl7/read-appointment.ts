import { isValidNpi, type Provider } from '../../domain';
import { readPerson } from './data-types';
import { problemAt, type Hl7Problem } from './hl7-errors';
import type { Hl7Message } from './hl7-message';
import type { Hl7Profile } from './profile';
import { fieldsWithValues, firstValue, whereFound } from './read-fields';
import { readDate } from './read-patient';

export interface AppointmentReading {
  appointmentId?: string;
  dateOfService: string;
  provider?: Provider;
}

export function readAppointmentId(message: Hl7Message, profile: Hl7Profile): string | undefined {
  return firstValue(message.segments, profile.appointment.id)?.value;
}

export function readAppointment(message: Hl7Message, profile: Hl7Profile, problems: Hl7Problem[]): AppointmentReading | undefined {
  const appointmentId = readAppointmentId(message, profile);
  const dateOfService = readDate(message, profile.appointment.start, 'appointment start', problems);
  const provider = readProvider(message, profile, problems);
  if (!dateOfService) return undefined;
  return { ...(appointmentId && { appointmentId }), dateOfService, ...(provider && { provider }) };
}

/**
 * The provider from the first person field (AIP-3, PV1-7, ...) whose id is an NPI, named from
 * the first that has a name. Ten digits that fail the NPI check digit are a typo to fix, not a
 * local id: local ids are shorter.
 */
function readProvider(message: Hl7Message, profile: Hl7Profile, problems: Hl7Problem[]): Provider | undefined {
  let npi: string | undefined;
  let named: { lastName?: string; firstName?: string } | undefined;
  for (const found of fieldsWithValues(message.segments, profile.appointment.provider)) {
    const person = readPerson(found.segment, found.path.field);
    if (npi === undefined && person.id !== undefined && /^\d{10}$/.test(person.id)) {
      if (!isValidNpi(person.id)) {
        problems.push(problemAt({ ...whereFound(found), component: 1 }, 102, 'provider NPI fails the check digit'));
        return undefined;
      }
      npi = person.id;
    }
    if (named === undefined && person.lastName !== undefined) named = person;
  }
  const provider: Provider = {
    ...(npi && { npi }),
    ...(named?.firstName && { firstName: named.firstName }),
    ...(named?.lastName && { lastName: named.lastName }),
  };
  return Object.keys(provider).length > 0 ? provider : undefined;
}
