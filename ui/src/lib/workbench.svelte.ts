// The workbench's state that outlives a view switch: which tool and pipeline are open, which
// tab of the Pipelines view shows, and a query handed to the tester (from an evaluation's
// per-query list, say).
import { setView } from './stores.svelte';

export type PipelineTab = 'stages' | 'tester' | 'evaluate';

export const workbench = $state({
  /** The tool open in the Tools view. */
  tool: null as string | null,
  /** The pipeline open in the Pipelines view. */
  pipeline: 'default' as string,
  tab: 'stages' as PipelineTab,
  /** The tester's query. */
  testerQuery: '',
  /** Bumped to ask the tester to run `testerQuery` once it shows. */
  testerRunTick: 0,
});

/** Opens a pipeline in the Pipelines view, at `tab`. */
export function openPipeline(name: string, tab: PipelineTab = 'stages'): void {
  workbench.pipeline = name;
  workbench.tab = tab;
  setView('pipelines');
}

/** Opens a tool in the Tools view. */
export function openTool(slug: string): void {
  workbench.tool = slug;
  setView('tools');
}

/** Runs `query` in the tester of `pipeline`. */
export function runInTester(pipeline: string, query: string): void {
  workbench.testerQuery = query;
  workbench.testerRunTick++;
  openPipeline(pipeline, 'tester');
}
