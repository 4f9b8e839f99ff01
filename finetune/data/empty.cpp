// Keeps xgrad_data a valid library while finetune/data/ is empty.
