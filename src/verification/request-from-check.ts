import type { EligibilityCheck, Gender, Relationship } from '../domain';
import { VerificationRequest, type InlineCredentials, type WireRelationship } from './wire';

const RELATIONSHIP: Record<Relationship, WireRelationship> = {
  self: 'Self',
  spouse: 'Spouse',
  child: 'Child',
  other: 'Other',
};

const GENDER: Record<Gender, 'F' | 'M' | 'U' | undefined> = {
  female: 'F',
  male: 'M',
  other: 'U',
  unknown: 'U',
};

export interface RequestFromCheckOptions {
  /** The portal to verify on; defaults to the resolved payer's first portal for the mode. */
  portalId?: string;
  mode?: 'sync' | 'async';
  /** The verification request's own id; defaults to the check's idempotency key. */
  externalId?: string;
  /** Inline portal credentials, for a portal whose credentials are not stored with the service. */
  credentials?: InlineCredentials;
}

/**
 * The v2 request body for a check, with stored credentials (clinicId + portalId). The payer is
 * named by its common id when the catalog resolved it, otherwise as the PMS named it, and the
 * idempotency key travels as externalId so a retried POST is safe.
 */
export function requestFromCheck(check: EligibilityCheck, options: RequestFromCheckOptions = {}): VerificationRequest {
  const resolution = check.coverage.resolution;
  const resolved = resolution?.status === 'resolved' ? resolution : undefined;
  const portals = options.mode === 'async' ? resolved?.asyncPortals : resolved?.syncPortals;
  const portalId = options.portalId ?? portals?.[0];
  const { patient, subscriber, provider } = check;
  return VerificationRequest.parse({
    clinicId: check.clinicId,
    portalId,
    payer: resolved
      ? { payerId: resolved.commonPayerId, name: resolved.name }
      : { payerId: check.coverage.payer.id, name: check.coverage.payer.name },
    patient: {
      firstName: patient.firstName,
      middleName: patient.middleName,
      lastName: patient.lastName,
      dateOfBirth: patient.birthDate,
      gender: patient.gender ? GENDER[patient.gender] : undefined,
      memberId: patient.memberId,
    },
    subscriber: {
      firstName: subscriber.firstName,
      middleName: subscriber.middleName,
      lastName: subscriber.lastName,
      dateOfBirth: subscriber.birthDate,
      memberId: subscriber.memberId,
      relationship: RELATIONSHIP[subscriber.relationship],
      groupNumber: check.coverage.groupNumber,
    },
    provider: provider && Object.values(provider).some(Boolean) ? provider : undefined,
    dateOfService: check.dateOfService,
    externalId: options.externalId ?? check.idempotencyKey,
    ...(options.credentials && { credentials: options.credentials }),
  });
}
