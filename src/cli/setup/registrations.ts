import type { Command } from 'commander';
import type { Email, Registration, SmsMessage } from '../../verification/wire';
import { listAll, type CliIo } from '../io';
import { withService } from '../service-context';
import { printRecord, printRows, type Column } from '../table';

const registrationColumns: Column<Registration>[] = [
  ['correlationId', (r) => r.correlationId],
  ['clinicId', (r) => r.clinicId],
  ['portalId', (r) => r.portalId],
  ['registeredEmail', (r) => r.registeredEmail],
  ['registeredPhoneNumber', (r) => r.registeredPhoneNumber],
  ['status', (r) => r.status],
];
/** The body carries what a person needs (the confirmation link, the one-time code): one line of it. */
const oneLine = (text: string | null | undefined) => text?.replace(/\s+/g, ' ').trim();
const emailColumns: Column<Email>[] = [
  ['receivedAt', (e) => e.receivedAt],
  ['registration', (e) => e.correlationId],
  ['from', (e) => e.from],
  ['subject', (e) => e.subject],
  ['body', (e) => oneLine(e.body)],
];
const smsColumns: Column<SmsMessage>[] = [
  ['receivedAt', (m) => m.receivedAt],
  ['registration', (m) => m.correlationId],
  ['from', (m) => m.from],
  ['body', (m) => oneLine(m.body)],
];

export function registerRegistrations(setup: Command, io: CliIo): void {
  const reg = setup.command('registration').description('Payer portal registrations and their 2FA messages');
  reg
    .command('create')
    .description('Provision an email (and for SMS portals a phone number) to create the portal account with')
    .requiredOption('--clinic <clinicId>', 'clinic id')
    .requiredOption('--portal <portalId>', 'portal id')
    .option('--forwarding-email <email>', 'forward portal mail to the office')
    .option('--json', 'print JSON')
    .action(async (opts: { clinic: string; portal: string; forwardingEmail?: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        const created = await client.createRegistration({
          clinicId: opts.clinic,
          portalId: opts.portal,
          ...(opts.forwardingEmail ? { forwardingEmail: opts.forwardingEmail } : {}),
        });
        printRecord(io, created, Boolean(opts.json));
        if (!opts.json) {
          io.stdout.write(
            `next: create the portal account with these details, then \`dental-elig setup credentials set\`; ` +
              `\`dental-elig setup registration emails ${created.correlationId}\` shows the mail the portal sends\n`,
          );
        }
      }),
    );
  reg
    .command('list')
    .description('List payer portal registrations')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) =>
        printRows(io, await listAll(io, client, (page) => client.listRegistrations(page)), registrationColumns, Boolean(opts.json)),
      ),
    );
  reg
    .command('reevaluate')
    .description('Ask the service to look at the portal again (e.g. it switched to SMS 2FA)')
    .requiredOption('--clinic <clinicId>', 'clinic (office) id')
    .requiredOption('--portal <portalId>', 'portal id')
    .option('--json', 'print JSON')
    .action(async (opts: { clinic: string; portal: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => printRecord(io, await client.reevaluateRegistration(opts.clinic, opts.portal), Boolean(opts.json))),
    );
  reg
    .command('emails [correlationId]')
    .description("Emails received for a registration (all registrations' when no id is given)")
    .option('--json', 'print JSON')
    .action(async (correlationId: string | undefined, opts: { json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        const list = correlationId !== undefined ? (page: object) => client.registrationEmails(correlationId, page) : (page: object) => client.listEmails(page);
        printRows(io, await listAll(io, client, list), emailColumns, Boolean(opts.json));
      }),
    );
  reg
    .command('sms [correlationId]')
    .description("SMS messages received for a registration (all registrations' when no id is given)")
    .option('--json', 'print JSON')
    .action(async (correlationId: string | undefined, opts: { json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        const list = correlationId !== undefined
          ? (page: object) => client.registrationSmsMessages(correlationId, page)
          : (page: object) => client.listSmsMessages(page);
        printRows(io, await listAll(io, client, list), smsColumns, Boolean(opts.json));
      }),
    );
}
