"""Run a tuner workflow exactly as tune() registers it: inside Trinity's AgentScopeWorkflowAdapterV1.

The adapter builds agentscope's OpenAIChatModel on a Trinity ModelWrapper that
records every call (token ids, logprobs) and turns the episode into
Experiences. Here the wrapper's engine is an external OpenAI-compatible
address: in the tests and the call-overhead benchmark, standins.fake_vllm_server.
"""

from __future__ import annotations

from typing import Callable


async def run_in_adapter(workflow_func: Callable, raw_task: dict, api_address: str,
                         judge_func: Callable | None = None, max_tokens: int = 256, task_index: int = 0):
    """The Experiences Trinity collects from one run of `workflow_func` on `raw_task`."""
    from trinity.common.config import GenerationConfig, InferenceModelConfig
    from trinity.common.models.model import ModelWrapper
    from trinity.common.workflows import WORKFLOWS
    from trinity.common.workflows.workflow import Task

    wrapper = ModelWrapper(
        config=InferenceModelConfig(
            model_path="/nonexistent/test-model", engine_type="external", enable_openai_api=True,
            enable_history=True, temperature=1.0, top_p=1.0, max_response_tokens=max_tokens),
        api_address=api_address,
    )
    await wrapper.prepare()
    workflow_args = {"workflow_func": workflow_func}
    if judge_func is not None:
        workflow_args["judge_func"] = judge_func
    task = Task(
        workflow=WORKFLOWS.get("agentscope_workflow_adapter_v1"),
        raw_task=raw_task,
        workflow_args=workflow_args,
        rollout_args=GenerationConfig(temperature=1.0, top_p=1.0, max_tokens=max_tokens, logprobs=0),
        index={"taskset_id": 0, "index": task_index},
    )
    return await task.to_workflow(wrapper, []).run_async()
