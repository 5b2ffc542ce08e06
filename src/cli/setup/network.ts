import * as path from 'node:path';
import type { Command } from 'commander';
import { PayerCatalog, portalsOf } from '../../verification/payer-catalog';
import type { Payer, Portal } from '../../verification/wire';
import { CliError, listAll, loadCatalog, warnUnreadable, type CliIo } from '../io';
import { withService } from '../service-context';
import { printRecord, printRows, type Column } from '../table';

const payerColumns: Column<Payer>[] = [
  ['name', (p) => p.name],
  ['commonPayerId', (p) => p.commonPayerId],
  ['primaryPayerId', (p) => p.primaryPayerId],
  ['async', (p) => (portalsOf(p).asyncPortals.length ? 'yes' : 'no')],
  ['syncPortals', (p) => portalsOf(p).syncPortals.join(', ')],
  ['asyncPortals', (p) => portalsOf(p).asyncPortals.join(', ')],
];

const portalColumns: Column<Portal>[] = [
  ['portalId', (p) => p.portalId],
  ['name', (p) => p.name],
  ['authentication', (p) => (p.requiresAuthentication === false ? 'none' : (p.authenticationMethods ?? []).join(', ') || 'password')],
  ['login', (p) => (p.loginMethods ?? []).join(', ')],
];

export function registerNetwork(setup: Command, io: CliIo): void {
  const payers = setup.command('payers').description('The payer network');
  payers
    .command('list')
    .description('List supported payers, with their portals and whether they take asynchronous verification')
    .option('--async', 'only payers that take asynchronous verification')
    .option('--search <text>', 'only payers whose name or ids contain the text')
    .option('--json', 'print JSON')
    .action(async (opts: { async?: boolean; search?: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        const all = await listAll(io, client, (page) => client.listPayers(page));
        const catalog = new PayerCatalog({ syncedAt: new Date().toISOString(), payers: all, portals: [] });
        const rows = (opts.search ? catalog.search(opts.search) : all).filter((p) => !opts.async || portalsOf(p).asyncPortals.length > 0);
        printRows(io, rows, payerColumns, Boolean(opts.json));
      }),
    );
  payers
    .command('sync')
    .description(
      'Refresh the local payer catalog that `convert --catalog` reads: only what changed since the last sync, or everything with --full. ' +
        'Writes DENTAL_ELIG_CATALOG, catalogFile in the config file, or .dental-elig/catalog.json under the current folder.',
    )
    .option('--full', 'list the whole network again and replace the catalog, so payers that left the network leave it too')
    .option('--json', 'print JSON')
    .action(async (opts: { full?: boolean; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client, settings) => {
        const previous = await loadCatalog(io, settings.catalogFile).catch(() => undefined);
        const unreadable: string[] = [];
        const catalog = await PayerCatalog.sync(client, previous, { full: Boolean(opts.full), unreadable: (found) => unreadable.push(...found) });
        warnUnreadable(io, unreadable);
        await catalog.save(settings.catalogFile).catch((err: unknown) => {
          throw new CliError(`${(err as Error).message}; DENTAL_ELIG_CATALOG or catalogFile in the config file names where it goes`);
        });
        const kept = new Set(catalog.payers.map((p) => p.primaryPayerId));
        const summary = {
          file: path.resolve(settings.catalogFile),
          mode: previous && !opts.full ? 'changes since the last sync' : 'full',
          syncedAt: catalog.snapshot.syncedAt,
          payers: catalog.payers.length,
          portals: catalog.portals.length,
          removedPayers: (previous?.payers ?? []).filter((p) => !kept.has(p.primaryPayerId)).length,
        };
        if (opts.json) return printRecord(io, summary, true);
        io.stdout.write(
          `payer catalog (${summary.mode}): ${summary.payers} payers, ${summary.portals} portals` +
            `${summary.removedPayers ? `, ${summary.removedPayers} removed` : ''} -> ${summary.file}\n`,
        );
      }),
    );

  setup
    .command('portals')
    .description('The portal network')
    .command('list')
    .description('List the payer portals, with their authentication and login methods')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => {
        printRows(io, await listAll(io, client, (page) => client.listPortals(page)), portalColumns, Boolean(opts.json));
      }),
    );
}
