import type { Command } from 'commander';
import { ServiceError } from '../verification/errors';
import { VerificationClient } from '../verification/client';
import { loadSettings, type CliSettings } from './config';
import { CliError, type CliIo } from './io';

/** Commands that talk to the service run inside this: it builds the client and closes it. */
export async function withService<T>(
  io: CliIo,
  command: Command,
  run: (client: VerificationClient, settings: CliSettings) => Promise<T>,
): Promise<T> {
  const settings = loadSettings(io.env, command.optsWithGlobals<{ config?: string }>().config);
  const client = new VerificationClient(settings.client, {
    log: {
      warn: (_obj, msg) => io.stderr.write(`dental-elig: warning: ${msg}\n`),
      debug: () => undefined,
    },
  });
  try {
    return await run(client, settings);
  } catch (err) {
    throw err instanceof ServiceError ? toCliError(err) : err;
  } finally {
    await client.close();
  }
}

/** A service failure as one line: the operation, status, problem and field errors. */
export function toCliError(err: ServiceError): CliError {
  const reportId = err.status !== undefined && err.status >= 500 && err.requestId ? ` (report request id ${err.requestId})` : '';
  return new CliError(`${err.message}${reportId}`);
}
