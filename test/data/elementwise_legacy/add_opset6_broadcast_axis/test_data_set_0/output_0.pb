ByJ`/▌4A>'/AА╜A╒└AЙЫAгTаAVfНAъ?ЮA`цAQ$ъA\еыA8xэA
Ц&A"о0AЖёA	▌5AонЪAх╧вAO:зAК└аAPъANашAФVьAЎ┬ёA