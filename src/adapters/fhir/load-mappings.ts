import { verifiedStatuses } from './in/appointment-status';
import { payerIdSystem } from './in/payer';
import { relationshipSystems } from './in/relationship';
import { benefitCodes, categoryTable, errorCodes } from './out/codes';
import { extensionBase } from './out/extensions';
import { systemBase } from './systems';

/**
 * Reads every FHIR mapping file, and the variables that move their bases, now: each is read once
 * when first used, so a bad one would otherwise surface at the first check a service verifies or
 * writes, and again at each retry, rather than stopping it from starting.
 */
export function loadFhirMappings(): void {
  systemBase();
  extensionBase();
  categoryTable();
  benefitCodes();
  errorCodes();
  payerIdSystem();
  relationshipSystems();
  verifiedStatuses();
}
