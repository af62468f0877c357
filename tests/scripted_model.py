"""A test model: an agentscope chat model that gives scripted replies in order and records its prompts."""

from agentscope.message import TextBlock
from agentscope.model import ChatModelBase, ChatResponse


class ScriptedModel(ChatModelBase):
    """Answers call k with `replies[k]` (an Exception in the script is raised instead); keeps every prompt."""

    def __init__(self, replies):
        super().__init__(model_name="scripted", stream=False)
        self.replies = list(replies)
        self.calls = 0
        self.prompts = []

    async def __call__(self, messages, tools=None, tool_choice=None, structured_model=None, **kwargs):
        self.calls += 1
        self.prompts.append(messages)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return ChatResponse(content=[TextBlock(type="text", text=reply)])
