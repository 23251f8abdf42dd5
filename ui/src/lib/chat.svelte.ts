// The Chat view's state and actions. A turn streams into `chat.pending` over a Tauri channel;
// it lives here, not in the view, so an answer keeps streaming while another view is shown.
import { Channel } from '@tauri-apps/api/core';
import {
  api,
  errorMessage,
  type BackendConfig,
  type ChatConversation,
  type ChatEvent,
  type ChatOverview,
} from './api';
import { showToast } from './stores.svelte';

/** A turn on its way: what has streamed so far. */
export type PendingTurn = {
  run: string;
  question: string;
  answer: string;
  /** The embedded model being loaded, until the first token. */
  loading: { model: string; bytes: number } | null;
  /** Tools called so far, with the passages each admitted once it finished. */
  tools: { tool: string; admitted: number | null }[];
  notices: string[];
  stopping: boolean;
};

export const chat = $state({
  overview: null as ChatOverview | null,
  error: null as string | null,
  /** The open conversation; null: a new one. */
  current: null as ChatConversation | null,
  /** Filters the conversation list by title. */
  filter: '',
  draft: '',
  /** The mode of a new conversation (null: the configuration's default). */
  mode: null as string | null,
  /** Collections the next question may search ([]: every one). */
  collections: [] as string[],
  pending: null as PendingTurn | null,
  /** Why the last question got no answer. */
  sendError: null as string | null,
  /** Bumped to ask the composer to take focus. */
  focusTick: 0,
});

export async function loadChatOverview(): Promise<void> {
  try {
    chat.overview = await api.chatOverview();
    chat.error = null;
  } catch (e) {
    chat.error = errorMessage(e);
  }
}

export async function openConversation(id: string): Promise<void> {
  if (chat.pending) return;
  try {
    chat.current = await api.chatConversation(id);
    chat.sendError = null;
  } catch (e) {
    showToast(errorMessage(e), 'error');
  }
}

export function newConversation(): void {
  if (chat.pending) return;
  chat.current = null;
  chat.sendError = null;
  chat.focusTick++;
}

function apply(event: ChatEvent, turn: PendingTurn): void {
  switch (event.kind) {
    case 'loading':
      turn.loading = { model: event.model, bytes: event.bytes };
      break;
    case 'token':
      turn.loading = null;
      turn.answer += event.text;
      break;
    case 'tool_invoke':
      turn.tools.push({ tool: event.tool, admitted: null });
      break;
    case 'tool_result': {
      const open = [...turn.tools].reverse().find((t) => t.tool === event.tool && t.admitted === null);
      if (open) open.admitted = event.admitted;
      break;
    }
    case 'notice':
      turn.notices.push(event.text);
      break;
  }
}

/** Asks `question` (the draft when not given) in the open conversation, or starts one. */
export async function send(question: string = chat.draft): Promise<void> {
  const text = question.trim();
  if (!text || chat.pending) return;
  const run = crypto.randomUUID();
  chat.pending = { run, question: text, answer: '', loading: null, tools: [], notices: [], stopping: false };
  chat.sendError = null;
  if (question === chat.draft) chat.draft = '';
  const events = new Channel<ChatEvent>();
  events.onmessage = (event) => {
    if (chat.pending?.run === run) apply(event, chat.pending);
  };
  try {
    chat.current = await api.chatSend(
      {
        run,
        question: text,
        conversation: chat.current?.conversation.id ?? null,
        mode: chat.current ? null : chat.mode,
        // A running conversation keeps to the collections it began with (the engine's rule).
        collections: !chat.current && chat.collections.length ? [...chat.collections] : null,
      },
      events,
    );
  } catch (e) {
    chat.sendError = errorMessage(e);
    // Nothing was answered: the question goes back to the composer.
    if (!chat.draft) chat.draft = text;
  } finally {
    chat.pending = null;
    void loadChatOverview();
  }
}

/** Stops the answer being written; what was written stays. */
export async function stop(): Promise<void> {
  const pending = chat.pending;
  if (!pending || pending.stopping) return;
  pending.stopping = true;
  try {
    await api.chatStop(pending.run);
  } catch (e) {
    showToast(errorMessage(e), 'error');
  }
}

/** Takes the last turn back and returns its question (null when it could not). */
async function takeBack(): Promise<string | null> {
  const current = chat.current;
  if (!current || chat.pending) return null;
  try {
    const question = await api.chatTakeBack(current.conversation.id);
    current.turns.pop();
    return question;
  } catch (e) {
    showToast(errorMessage(e), 'error');
    return null;
  }
}

/** Asks the last question again, in place of its answer. */
export async function regenerate(): Promise<void> {
  const question = await takeBack();
  if (question !== null) await send(question);
}

/** Puts the last question back in the composer to edit and send again. */
export async function editLast(): Promise<void> {
  const question = await takeBack();
  if (question === null) return;
  chat.draft = question;
  chat.focusTick++;
}

export async function renameConversation(id: string, title: string): Promise<boolean> {
  try {
    const renamed = await api.chatRename(id, title);
    if (chat.current?.conversation.id === id) chat.current.conversation = renamed;
    await loadChatOverview();
    return true;
  } catch (e) {
    showToast(errorMessage(e), 'error');
    return false;
  }
}

export async function deleteConversation(id: string): Promise<void> {
  try {
    await api.chatDelete(id);
  } catch (e) {
    showToast(errorMessage(e), 'error');
    return;
  }
  if (chat.current?.conversation.id === id) chat.current = null;
  await loadChatOverview();
  showToast('Conversation deleted');
}

/**
 * Chooses where answers come from, after the backend answered a test request; a server's API
 * key goes to the OS keyring (never the settings).
 */
export async function chooseBackend(backend: BackendConfig | null, apiKey: string | null = null): Promise<string> {
  const answered = await api.chatChooseBackend(backend, apiKey);
  await loadChatOverview();
  return answered;
}
