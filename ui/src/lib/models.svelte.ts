// The Models view's state: the overview and the installs under way (they outlive the view:
// a download goes on while another view is shown, and its progress is here when it returns).
import { Channel } from '@tauri-apps/api/core';
import { api, errorMessage, type InstallProgress, type ModelsOverview } from './api';
import { showToast } from './stores.svelte';

/** An install under way: the file being fetched and how fast it comes. */
export type Install = {
  file: string;
  done: number;
  total: number | null;
  /** Bytes per second, over the install so far. */
  rate: number | null;
  started: number;
  cancelling: boolean;
};

export const modelsState = $state({
  overview: null as ModelsOverview | null,
  error: null as string | null,
  installs: {} as Record<string, Install>,
  /** The last install or removal that failed, by model id. */
  failures: {} as Record<string, string>,
});

export async function loadModels(): Promise<void> {
  try {
    modelsState.overview = await api.modelsOverview();
    modelsState.error = null;
  } catch (e) {
    modelsState.error = errorMessage(e);
  }
}

/** Installs a catalogue model; progress lands in `modelsState.installs[id]`. */
export async function install(id: string): Promise<void> {
  if (modelsState.installs[id]) return;
  const started = performance.now();
  modelsState.installs[id] = { file: '', done: 0, total: null, rate: null, started, cancelling: false };
  delete modelsState.failures[id];
  const events = new Channel<InstallProgress>();
  let firstDone: number | null = null;
  events.onmessage = (p) => {
    const current = modelsState.installs[id];
    if (!current) return;
    // A resumed download starts from what it had: the rate counts only this run's bytes.
    firstDone ??= p.done;
    const seconds = (performance.now() - started) / 1000;
    current.file = p.file;
    current.done = p.done;
    current.total = p.total;
    current.rate = seconds > 0.2 ? (p.done - firstDone) / seconds : null;
  };
  try {
    const row = await api.modelsInstall(id, events);
    showToast(`Installed ${row.id}${row.verified ? ', every file checked' : ''}`);
  } catch (e) {
    modelsState.failures[id] = errorMessage(e);
  } finally {
    delete modelsState.installs[id];
    await loadModels();
  }
}

export async function cancelInstall(id: string): Promise<void> {
  const current = modelsState.installs[id];
  if (!current) return;
  current.cancelling = true;
  await api.modelsCancel(id);
}

export async function removeModel(id: string): Promise<void> {
  try {
    await api.modelsRemove(id);
    delete modelsState.failures[id];
    showToast(`Removed ${id}`);
  } catch (e) {
    modelsState.failures[id] = errorMessage(e);
  }
  await loadModels();
}
