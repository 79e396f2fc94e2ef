"""What several test modules share: writers of tiny data files in the real loaders' formats
(`data_makers`, `data_makers_more`), plug-in tasks (`plugin_task`, `one_class_task`), the process
finder that checks no worker outlives a run (`procs`), and the checkout's paths (`paths`)."""
