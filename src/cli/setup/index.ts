import type { Command } from 'commander';
import type { CliIo } from '../io';
import { ENV, readsEnvironment, SERVICE_ENV, type EnvVar } from '../service-context';
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
  for (const command of leaves(setup)) {
    const name = [command.parent?.name(), command.name()].join(' ');
    readsEnvironment(command, [...SERVICE_ENV, ...(EXTRA_ENV[name] ?? [])]);
  }
}

/** What a setup command reads besides the service settings. */
const EXTRA_ENV: Record<string, readonly EnvVar[]> = {
  'organization create': [ENV.customerId],
  'organization list': [ENV.customerId],
  'credentials set': [ENV.password],
  'credentials update': [ENV.password],
  'credentials validate': [ENV.password],
  'credentials validation': [ENV.password],
  'payers sync': [ENV.catalog],
};

function leaves(command: Command): Command[] {
  return command.commands.length === 0 ? [command] : command.commands.flatMap(leaves);
}
