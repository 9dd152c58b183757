// VS Code client for the mpipec language server: starts `<mpipe.server.path> lsp` and talks
// to it over stdio. Highlighting, snippets and brackets come from package.json and work
// without the server.
'use strict';

const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

/** @type {LanguageClient | undefined} */
let client;

function serverCommand() {
  const configured = vscode.workspace.getConfiguration('mpipe').get('server.path');
  return typeof configured === 'string' && configured.trim() !== '' ? configured.trim() : 'mpipec';
}

function createClient() {
  const executable = { command: serverCommand(), args: ['lsp'], transport: TransportKind.stdio };
  /** @type {import('vscode-languageclient/node').ServerOptions} */
  const serverOptions = { run: executable, debug: executable };
  /** @type {import('vscode-languageclient/node').LanguageClientOptions} */
  const clientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'mpipe' },
      { scheme: 'untitled', language: 'mpipe' },
    ],
    synchronize: {
      fileEvents: vscode.workspace.createFileSystemWatcher('**/*.mpipe'),
    },
  };
  // The id `mpipe` makes the client read the `mpipe.trace.server` setting.
  return new LanguageClient('mpipe', 'mpipec language server', serverOptions, clientOptions);
}

async function start() {
  client = createClient();
  try {
    await client.start();
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    vscode.window.showErrorMessage(
      `mpipe: could not start \`${serverCommand()} lsp\` (${message}). ` +
        'Install mpipec or set "mpipe.server.path".',
    );
  }
}

async function stop() {
  if (client) {
    const running = client;
    client = undefined;
    try {
      await running.stop();
    } catch {
      // already stopped, or it never started
    }
  }
}

/** @param {vscode.ExtensionContext} context */
async function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand('mpipe.restartServer', async () => {
      await stop();
      await start();
    }),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration('mpipe.server.path')) {
        await stop();
        await start();
      }
    }),
  );
  await start();
}

function deactivate() {
  return stop();
}

module.exports = { activate, deactivate };
