import * as z from 'zod';
import { readMappingFile } from '../../../mapping-files';

const Statuses = z.array(z.string().min(1)).min(1);
const AppointmentStatusFile = z
  .looseObject({ verified: Statuses, willNotHappen: Statuses })
  .refine((f) => !f.verified.some((s) => f.willNotHappen.includes(s)), { path: ['willNotHappen'], error: 'must share no status with verified' });

let file: z.infer<typeof AppointmentStatusFile> | undefined;
const table = () => (file ??= readMappingFile('fhir/appointment-status.json', AppointmentStatusFile));

/** What an Appointment.status asks of the pipeline: verify its coverages, withdraw its checks, or neither. */
export type AppointmentStatusRule = 'verify' | 'withdraw' | 'neither';

/**
 * By mappings/fhir/appointment-status.json. An absent status (R4 requires one) is verified, as a
 * booking whose sender left it out has always been.
 */
export function appointmentStatusRule(status: string | undefined): AppointmentStatusRule {
  if (status === undefined || table().verified.includes(status)) return 'verify';
  return table().willNotHappen.includes(status) ? 'withdraw' : 'neither';
}

/** The statuses whose visit is on, as the poll searches them. */
export function verifiedStatuses(): readonly string[] {
  return table().verified;
}

/** The statuses whose visit will not happen. */
export function willNotHappenStatuses(): readonly string[] {
  return table().willNotHappen;
}
