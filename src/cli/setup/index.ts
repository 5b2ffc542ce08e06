import type { Command } from 'commander';
import type { CliIo } from '../io';
import { registerCredentials } from './credentials';
import { registerNetwork } from './network';
import { registerOrganizations } from './organizations';
import { registerRegistrations } from './registrations';

export function registerSetup(program: Command, io: CliIo): void {
  const setup = program.command('setup').description('Onboard a practice with the verification service (organizations, clinics, portals, credentials)');
  registerOrganizations(setup, io);
  registerNetwork(setup, io);
  registerRegistrations(setup, io);
  registerCredentials(setup, io);
}
