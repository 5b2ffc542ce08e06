export { checksFromBundle, convertBundle, type FhirConversion, type FhirInputOptions } from './from-bundle';
export { checksFromServer, convertFromServer, type FhirReader } from './checks-from-server';
export { appointmentStatusRule, verifiedStatuses, willNotHappenStatuses, type AppointmentStatusRule } from './appointment-status';
