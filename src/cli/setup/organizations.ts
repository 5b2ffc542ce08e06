import type { Command } from 'commander';
import type { Clinic, Organization } from '../../verification/wire';
import { CliError, listAll, type CliIo } from '../io';
import { withService } from '../service-context';
import { printRecord, printRows, type Column } from '../table';

const orgColumns: Column<Organization>[] = [
  ['organizationId', (o) => o.organizationId],
  ['name', (o) => o.name],
  ['customerId', (o) => o.customerId],
  ['createdAt', (o) => o.createdAt],
];

const clinicColumns: Column<Clinic>[] = [
  ['clinicId', (c) => c.clinicId],
  ['name', (c) => c.name],
  ['organizationId', (c) => c.organizationId],
  ['npi', (c) => c.npi],
];

export function registerOrganizations(setup: Command, io: CliIo): void {
  const org = setup.command('organization').description('Organizations: a practice or legal entity');
  org
    .command('create')
    .description('Create an organization for the customerId issued at onboarding')
    .option('--customer <customerId>', 'customer id (default: DENTAL_ELIG_CUSTOMER_ID)')
    .requiredOption('--name <name>', 'organization name')
    .option('--json', 'print JSON')
    .action(async (opts: { customer?: string; name: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client, settings) => {
        const customerId = opts.customer ?? settings.customerId;
        if (!customerId) throw new CliError('--customer: required (or set DENTAL_ELIG_CUSTOMER_ID)', 2);
        printRecord(io, await client.createOrganization({ customerId, name: opts.name }), Boolean(opts.json));
      }),
    );
  org
    .command('get <organizationId>')
    .description('Show one organization')
    .option('--json', 'print JSON')
    .action(async (organizationId: string, opts: { json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => printRecord(io, await client.getOrganization(organizationId), Boolean(opts.json))),
    );
  org
    .command('list')
    .description("List a customer's organizations")
    .option('--customer <customerId>', 'customer id (default: DENTAL_ELIG_CUSTOMER_ID)')
    .option('--json', 'print JSON')
    .action(async (opts: { customer?: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client, settings) => {
        const customerId = opts.customer ?? settings.customerId;
        if (!customerId) throw new CliError('--customer: required (or set DENTAL_ELIG_CUSTOMER_ID)', 2);
        const rows = await listAll(io, client, (page) => client.listOrganizations(customerId, page));
        printRows(io, rows, orgColumns, Boolean(opts.json));
      }),
    );

  const clinic = setup.command('clinic').description('Clinics: physical offices of an organization');
  clinic
    .command('create')
    .description('Create a clinic (a physical office) in an organization')
    .requiredOption('--organization <organizationId>', 'organization id')
    .requiredOption('--name <name>', 'clinic name')
    .option('--npi <npi>', 'the office NPI (type 2)')
    .option('--tax-id <ein>', 'the office tax id')
    .option('--json', 'print JSON')
    .action(async (opts: { organization: string; name: string; npi?: string; taxId?: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        const created = await client.createClinic({
          organizationId: opts.organization,
          name: opts.name,
          ...(opts.npi ? { npi: opts.npi } : {}),
          ...(opts.taxId ? { taxId: opts.taxId } : {}),
        });
        printRecord(io, created, Boolean(opts.json));
      }),
    );
  clinic
    .command('get <clinicId>')
    .description('Show one clinic')
    .option('--json', 'print JSON')
    .action(async (clinicId: string, opts: { json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => printRecord(io, await client.getClinic(clinicId), Boolean(opts.json))),
    );
  clinic
    .command('list')
    .description("List an organization's clinics")
    .requiredOption('--organization <organizationId>', 'organization id')
    .option('--json', 'print JSON')
    .action(async (opts: { organization: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        const rows = await listAll(io, client, (page) => client.listClinics(opts.organization, page));
        printRows(io, rows, clinicColumns, Boolean(opts.json));
      }),
    );
}
